from django.contrib import admin

from .models import StoredResponse


@admin.register(StoredResponse)
class StoredResponseAdmin(admin.ModelAdmin):
    """Read-only: rows are written by the /v1 door and the prune task."""

    list_display = ("id", "owner_name", "model", "previous_response_id", "created_at")
    search_fields = ("id", "owner_name", "model")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
