"""Django admin for API keys (OPS-2, KEY-2).

- The hash is never rendered (excluded from every form and list).
- Adding a key goes through `key_create`; the plaintext is shown exactly once,
  in a success message after the save.
- Coordinator rows are read-only (the coordinator owns them).
- Actions: revoke, rotate (rotation shows the new plaintext once).
- Every write goes through keys.services, so the revision is bumped.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from .fields import EDITABLE
from .models import ApiKey, KeySource
from .services import (
    clean_allowed_models,
    clean_client_ips,
    key_create,
    key_delete,
    key_revoke,
    key_rotate,
    key_update,
)

_LIST_HELP = "Comma- or newline-separated."


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]


class ApiKeyForm(forms.ModelForm):
    allowed_models = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=f"Model names and aliases; empty = every model. {_LIST_HELP}",
    )
    allowed_client_ips = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=f"IPs or CIDRs (IPv4/IPv6); empty = any address. {_LIST_HELP}",
    )

    class Meta:
        model = ApiKey
        fields = EDITABLE

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["allowed_models"] = "\n".join(
                self.instance.allowed_models or []
            )
            self.initial["allowed_client_ips"] = "\n".join(
                self.instance.allowed_client_ips or []
            )

    def clean_allowed_models(self) -> list[str]:
        return clean_allowed_models(
            _split(self.cleaned_data.get("allowed_models") or "")
        )

    def clean_allowed_client_ips(self) -> list[str]:
        try:
            return clean_client_ips(
                _split(self.cleaned_data.get("allowed_client_ips") or "")
            )
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


def _plaintext_message(request, verb: str, key: ApiKey, plaintext: str) -> None:
    messages.success(
        request,
        format_html(
            "{} API key “{}”. Copy it now — it will not be shown again: <code>{}</code>",
            verb,
            key.name,
            plaintext,
        ),
    )


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    exclude = ("key_hash",)
    list_display = (
        "name",
        "owner",
        "source",
        "display_hint",
        "models",
        "rate_limit",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("source", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "owner", "hint", "key_id")
    actions = ("revoke_keys", "rotate_keys")
    readonly_fields = ("source", "key_id", "display_hint", "created_at", "revoked_at")

    @admin.display(description="hint")
    def display_hint(self, obj: ApiKey) -> str:
        return obj.display_hint

    @admin.display(description="models")
    def models(self, obj: ApiKey) -> str:
        return ", ".join(obj.allowed_models) if obj.allowed_models else "all"

    # -- forms -------------------------------------------------------------
    def get_fields(self, request, obj=None):
        editable = list(ApiKeyForm.Meta.fields)
        if obj is None:
            return editable
        return [
            "name",
            "display_hint",
            "source",
            "key_id",
            *editable[1:],
            "created_at",
            "revoked_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.source == KeySource.COORDINATOR:
            return [*self.readonly_fields, *ApiKeyForm.Meta.fields]
        return self.readonly_fields

    def has_change_permission(self, request, obj=None) -> bool:
        # Coordinator rows stay viewable but never savable.
        if obj is not None and obj.source == KeySource.COORDINATOR:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.source == KeySource.COORDINATOR:
            return False
        return super().has_delete_permission(request, obj)

    # -- writes go through the services ------------------------------------
    def save_model(self, request, obj: ApiKey, form, change: bool) -> None:
        data = {name: form.cleaned_data.get(name) for name in ApiKeyForm.Meta.fields}
        if change:
            key_update(obj, **data)
            return
        key, plaintext = key_create(**data)
        # The admin continues with `obj` (log entry, redirect): load the new
        # row into it. `_state.adding` is Django's documented saved/unsaved
        # flag (Model._state); refresh_from_db sets `_state.db` itself.
        obj.pk = key.pk
        obj.refresh_from_db()
        obj._state.adding = False
        _plaintext_message(request, "Created", key, plaintext)

    def delete_model(self, request, obj: ApiKey) -> None:
        key_delete(obj)

    def delete_queryset(self, request, queryset) -> None:
        for key in queryset.filter(source=KeySource.OPERATOR):
            key_delete(key)

    # -- actions -----------------------------------------------------------
    @admin.action(description="Revoke selected operator keys")
    def revoke_keys(self, request, queryset) -> None:
        done = 0
        for key in queryset.filter(source=KeySource.OPERATOR, revoked_at__isnull=True):
            key_revoke(key)
            done += 1
        skipped = queryset.count() - done
        msg = f"Revoked {done} key(s)."
        if skipped:
            msg += (
                f" Skipped {skipped} (already revoked or managed by the coordinator)."
            )
        self.message_user(request, msg, messages.SUCCESS if done else messages.WARNING)

    @admin.action(description="Rotate selected operator keys (new key, then revoke)")
    def rotate_keys(self, request, queryset) -> None:
        rotated = 0
        for key in queryset.filter(source=KeySource.OPERATOR, revoked_at__isnull=True):
            new, plaintext = key_rotate(key)
            _plaintext_message(request, "Rotated", new, plaintext)
            rotated += 1
        if not rotated:
            self.message_user(
                request,
                "Nothing rotated: only active operator keys can be rotated.",
                messages.WARNING,
            )
