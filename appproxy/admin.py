"""Django admin for the AppProxy mirror: read-only (OPS-2).

The coordinator owns these rows; an operator can look, never edit, add or
delete. The full ``raw`` circuit object is shown on the detail page only
(it carries no secret: circuits never hold the api/jwt secrets).
"""

from __future__ import annotations

from django.contrib import admin

from .models import Circuit, EventRecord, Publication, Route, WorkerState


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class RouteInline(admin.TabularInline):
    model = Route
    extra = 0
    can_delete = False
    fields = ("route_id", "session_id", "kernel_host", "kernel_port", "traffic_ratio", "backend_name")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Circuit)
class CircuitAdmin(ReadOnlyAdmin):
    list_display = ("subdomain", "model", "app", "open_to_public", "routes_count", "endpoint_id", "updated_at")
    list_filter = ("open_to_public", "runtime_variant")
    search_fields = ("subdomain", "circuit_id", "endpoint_id", "model", "app")
    inlines = (RouteInline,)

    @admin.display(description="routes")
    def routes_count(self, obj: Circuit) -> int:
        return obj.routes.count()


@admin.register(Route)
class RouteAdmin(ReadOnlyAdmin):
    list_display = ("circuit", "kernel_host", "kernel_port", "traffic_ratio", "backend_name")
    search_fields = ("route_id", "session_id", "kernel_host", "backend_name")


@admin.register(WorkerState)
class WorkerStateAdmin(ReadOnlyAdmin):
    list_display = (
        "authority",
        "node_id",
        "mode",
        "worker_id",
        "status",
        "first_pull_applied",
        "last_heartbeat_at",
        "last_pull_at",
        "last_pull_result",
        "revision",
        "pulls_full",
        "pulls_unchanged",
        "circuits",
        "last_error",
    )
    list_filter = ("mode", "status")
    search_fields = ("authority", "node_id", "worker_id")


@admin.register(Publication)
class PublicationAdmin(ReadOnlyAdmin):
    """ROUTER-mode publications (the coordinator owns them; no secret)."""

    list_display = ("model", "authority", "alias_list", "mapping_list", "control_mode", "revision", "updated_at")
    list_filter = ("authority", "control_mode")
    search_fields = ("model", "aliases", "revision")

    @admin.display(description="aliases")
    def alias_list(self, obj: Publication) -> str:
        return ", ".join(str(a) for a in obj.aliases or []) or "-"

    @admin.display(description="mappings (endpoint · ratio)")
    def mapping_list(self, obj: Publication) -> str:
        parts = [
            f"{m.get('endpoint_id', '')} · {m.get('ratio', '')}" for m in obj.mappings or [] if isinstance(m, dict)
        ]
        return "; ".join(parts) or "-"


@admin.register(EventRecord)
class EventRecordAdmin(ReadOnlyAdmin):
    list_display = ("name", "fmt", "authority", "received_at", "applied_at", "acked_at", "ok")
    list_filter = ("name", "fmt", "ok")
    search_fields = ("detail",)
