"""Django admin for the routing mirror (OPS-2).

- Backends: rows of source `admin` are the operator's own and fully
  editable; `config` rows belong to the YAML file and `appproxy` rows to the
  coordinator reconcile, so they are view-only here (no change, no delete)
  and the page says who owns them.
- Every write bumps the routing revision in the same transaction, so every
  web process serves the change within a second (CORE-8).
- A backend's upstream `api_key` is write-only: a password input that never
  renders a value; left blank on edit it keeps the stored key. It is never
  shown in a list, a detail page or a change message (RTR-7).
- A backend URL may carry credentials (`http://user:${PASS}@host`): its
  userinfo is shown as `***` everywhere here, the edit form included; a URL
  submitted with `***` for its userinfo keeps the stored one.
- RoutingRevision and ConfigDocument are read-only; secret-looking values in
  the config document are masked.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils.html import format_html

from .config_schema import ConfigError, interpolate
from .core.backend import masked_url
from .models import Backend, ConfigDocument, RoutingRevision, Source
from .providers import COMMAND_KINDS, KINDS, path_of
from .revision import BACKEND, bump_revision, touch

admin.site.site_header = "LLM router admin"
admin.site.site_title = "LLM router admin"
admin.site.index_title = "Administration"
admin.site.site_url = "/dashboard/"

_URL = re.compile(r"^https?://[^/\s]+")
_MASKED_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)\*\*\*@")
_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)@")
_ENV_ONLY = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
_SECRET_NAMES = ("secret", "token", "password", "passwd", "api_key", "apikey", "credential", "private")
MASK = "***"

OWNERS = {
    Source.ADMIN: "Managed here (source admin). Saving or deleting reaches every web process within a second.",
    Source.CONFIG: (
        "Managed by the YAML config file{path}. Edit the file instead: the router applies it within a "
        "second, and would overwrite any change made here."
    ),
    Source.APPPROXY: (
        "Managed by the AppProxy coordinator (reconcile). It changes when the coordinator's circuits "
        "and routes change; an edit here would be overwritten."
    ),
}


def _split(text: str) -> list[str]:
    out: list[str] = []
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return out


def redacted(value: Any, key: str = "") -> Any:
    """A copy of a config document with secret-looking values masked.

    `${VAR}` references stay visible (they name a variable, not a secret).
    """
    if isinstance(value, dict):
        return {k: redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, key) for v in value]
    if key and any(part in key.lower() for part in _SECRET_NAMES) and value not in (None, ""):
        if isinstance(value, str) and _ENV_ONLY.match(value):
            return value
        return MASK
    return value


class BackendForm(forms.ModelForm):
    kind = forms.ChoiceField(
        # A command kind runs a program on the router's host: YAML only.
        choices=[(k, f"{k} ({path_of(k)})") for k in sorted(KINDS - COMMAND_KINDS)],
        initial="openai_compat",
    )
    models = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Client-facing model names; aliases are just more names. Comma- or newline-separated.",
    )
    api_key = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Sent upstream as a Bearer token. A literal key or a ${ENV_VAR} reference.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored API key")

    class Meta:
        model = Backend
        fields = (
            "name",
            "url",
            "kind",
            "models",
            "served_model",
            "weight",
            "capacity",
            "priority",
            "api_key",
            "connect_timeout",
            "read_timeout",
        )
        help_texts = {
            "served_model": "Optional: the model field sent upstream instead of the requested name.",
            "weight": "1 to 1000; the share of traffic among equal-priority backends.",
            "capacity": "Maximum requests in flight; empty = unlimited.",
            "priority": "Lower is preferred (0 before 1).",
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The stored key never travels back to the browser, not even as initial data.
        self.initial["api_key"] = ""
        if "url" in self.fields:  # absent on the view-only page of a config/appproxy row
            self.fields["url"].help_text = (
                "e.g. http://10.0.0.5:8000. Credentials in the URL may be ${ENV_VAR} references "
                "(http://user:${PASS}@host), resolved when routing is compiled; they are never shown back."
            )
        if self.instance.pk:
            self.initial["models"] = "\n".join(self.instance.models or [])
            self.initial["url"] = masked_url(self.instance.url or "")
            has_key = bool(self.instance.api_key)
            self.fields["api_key"].help_text = (
                "A key is stored. Leave blank to keep it; type a new one to replace it. "
                if has_key
                else "No key stored. "
            ) + "A literal key or a ${ENV_VAR} reference."
        else:
            del self.fields["clear_api_key"]

    def clean_url(self) -> str:
        url = (self.cleaned_data.get("url") or "").strip()
        stored = _USERINFO.match(self.instance.url or "") if self.instance.pk else None
        if stored is not None and _MASKED_USERINFO.match(url):
            # The form showed `***` for the userinfo: keep the stored one.
            url = _MASKED_USERINFO.sub(lambda m: f"{m.group(1)}{stored.group(1)}@", url)
        try:
            resolved = interpolate(url, "url") if "${" in url else url
        except ConfigError as exc:  # names the variable, never a value
            raise forms.ValidationError(str(exc)) from None
        if not _URL.match(resolved):
            raise forms.ValidationError("Enter an http:// or https:// URL, e.g. http://10.0.0.5:8000.")
        return url.rstrip("/")

    def clean_models(self) -> list[str]:
        names = _split(self.cleaned_data.get("models") or "")
        if not names:
            raise forms.ValidationError("A backend serves at least one model name.")
        return names

    def clean_weight(self) -> int:
        weight = self.cleaned_data.get("weight")
        if weight is None or not 1 <= weight <= 1000:
            raise forms.ValidationError("The weight is between 1 and 1000.")
        return weight

    def clean_capacity(self) -> int | None:
        capacity = self.cleaned_data.get("capacity")
        if capacity is not None and capacity < 1:
            raise forms.ValidationError("Capacity is at least 1 (leave it empty for unlimited).")
        return capacity

    def clean_api_key(self) -> str:
        value = self.cleaned_data.get("api_key") or ""
        if "${" in value:
            try:
                interpolate(value, "api_key")
            except ConfigError as exc:  # names the variable, never a value
                raise forms.ValidationError(str(exc)) from None
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("clear_api_key"):
            data["api_key"] = ""
        elif not data.get("api_key") and self.instance.pk:
            data["api_key"] = self.instance.api_key  # blank = keep
        return data


@admin.register(Backend)
class BackendAdmin(admin.ModelAdmin):
    form = BackendForm
    list_display = (
        "name",
        "source",
        "kind",
        "url_shown",
        "model_list",
        "weight",
        "capacity",
        "priority",
        "upstream_key",
    )
    list_filter = ("source", "kind")
    search_fields = ("name",)  # not the URL: a search would probe its password
    ordering = ("source", "name")
    _view_only = (
        "ownership",
        "name",
        "source",
        "url_shown",
        "kind",
        "model_list",
        "served_model",
        "weight",
        "capacity",
        "priority",
        "upstream_key",
        "header_names",
        "connect_timeout",
        "read_timeout",
        "updated_at",
    )

    # -- display (never the api_key itself, never the URL's userinfo) ----------
    @admin.display(description="url", ordering="url")
    def url_shown(self, obj: Backend) -> str:
        return masked_url(obj.url or "")

    @admin.display(description="models")
    def model_list(self, obj: Backend) -> str:
        return ", ".join(obj.models or [])

    @admin.display(description="upstream key", boolean=True)
    def upstream_key(self, obj: Backend) -> bool:
        return bool(obj.api_key)

    @admin.display(description="header names")
    def header_names(self, obj: Backend) -> str:
        return ", ".join(sorted((obj.extra or {}).get("headers", {}))) or "—"

    @admin.display(description="managed by")
    def ownership(self, obj: Backend | None) -> str:
        if obj is None:
            return ""
        text = OWNERS.get(obj.source, f"Source {obj.source}.")
        if obj.source == Source.CONFIG:
            path = ConfigDocument.objects.filter(pk=1).values_list("path", flat=True).first()
            text = text.format(path=f" ({path})" if path else "")
        return format_html("<strong>{}</strong> — {}", obj.get_source_display(), text)

    # -- forms -----------------------------------------------------------------
    @staticmethod
    def _editable(obj: Backend | None) -> bool:
        return obj is None or obj.source == Source.ADMIN

    def get_fieldsets(self, request, obj=None):
        if not self._editable(obj):
            return [(None, {"fields": self._view_only})]
        fieldsets = [
            (None, {"fields": ("name", "url", "kind", "models", "served_model")}),
            ("Selection", {"fields": ("weight", "capacity", "priority")}),
            ("Upstream", {"fields": ("api_key", "connect_timeout", "read_timeout")}),
        ]
        if obj is not None:
            fieldsets[2][1]["fields"] = ("api_key", "clear_api_key", "connect_timeout", "read_timeout")
            fieldsets.insert(0, ("Ownership", {"fields": ("ownership", "updated_at")}))
        return fieldsets

    def get_readonly_fields(self, request, obj=None):
        if not self._editable(obj):
            return self._view_only
        return ("ownership", "updated_at")

    def has_change_permission(self, request, obj=None) -> bool:
        if not self._editable(obj):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        if not self._editable(obj):
            return False
        return super().has_delete_permission(request, obj)

    # -- writes: admin rows only, each with its revision bump ---------------------
    def save_model(self, request, obj: Backend, form, change: bool) -> None:
        with transaction.atomic():
            if change and Backend.objects.filter(pk=obj.pk).exclude(source=Source.ADMIN).exists():
                raise PermissionDenied("only admin-source backends are edited here")
            obj.source = Source.ADMIN
            if change:  # a rename: the old name goes
                touch(BACKEND, *Backend.objects.filter(pk=obj.pk).values_list("name", flat=True))
            obj.save()
            touch(BACKEND, obj.name)
            bump_revision(f"admin: {'changed' if change else 'added'} backend {obj.name}")

    def delete_model(self, request, obj: Backend) -> None:
        if obj.source != Source.ADMIN:
            raise PermissionDenied("only admin-source backends are deleted here")
        with transaction.atomic():
            obj.delete()
            touch(BACKEND, obj.name)
            bump_revision(f"admin: deleted backend {obj.name}")

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            rows = queryset.filter(source=Source.ADMIN)
            names = sorted(rows.values_list("name", flat=True))
            if not names:
                return
            rows.delete()
            touch(BACKEND, *names)
            bump_revision(f"admin: deleted backends {', '.join(names)}")


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only their writers change: listed, never added, edited or deleted here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(RoutingRevision)
class RoutingRevisionAdmin(ReadOnlyAdmin):
    list_display = ("revision", "reason", "updated_at")
    fields = readonly_fields = ("revision", "reason", "updated_at")


@admin.register(ConfigDocument)
class ConfigDocumentAdmin(ReadOnlyAdmin):
    list_display = ("path", "digest_short", "applied_at")
    fields = readonly_fields = ("path", "digest", "applied_at", "document_view")

    @admin.display(description="digest")
    def digest_short(self, obj: ConfigDocument) -> str:
        return obj.digest[:12]

    @admin.display(description="document (backends are listed under Backends; secrets masked)")
    def document_view(self, obj: ConfigDocument) -> str:
        text = json.dumps(redacted(obj.document or {}), indent=2, sort_keys=True, default=str)
        return format_html('<pre style="margin:0;white-space:pre-wrap">{}</pre>', text)
