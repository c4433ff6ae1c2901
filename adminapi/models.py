"""The admin API's own rows: its bearer tokens and the audit log.

An `AdminToken` stores only the SHA-256 digest of its secret and a masked
hint, like an API key; the plaintext exists once, in the return value of
`adminapi.tokens.token_create`. An `AuditEntry` is written in the same
transaction as the change it records (adminapi/audit.py), and holds digests
of the state before and after, never a secret.
"""

from __future__ import annotations

from django.db import models


class AdminToken(models.Model):
    name = models.CharField(max_length=200)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(max_length=32, blank=True, default="", editable=False)
    read_only = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ("name", "-created_at")

    def __repr__(self) -> str:  # never the hash
        state = " revoked" if self.revoked_at else ""
        return f"<AdminToken {self.pk} {self.name!r} {self.hint}{' read-only' if self.read_only else ''}{state}>"

    __str__ = __repr__


class AuditEntry(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=250, help_text="token:<name> or user:<username>")
    action = models.CharField(max_length=64, help_text="e.g. key.create, config.put")
    target = models.CharField(max_length=300, blank=True, default="")
    before = models.CharField(max_length=64, blank=True, default="", help_text="digest of the state before")
    after = models.CharField(max_length=64, blank=True, default="", help_text="digest of the state after")
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-at", "-id")
        verbose_name_plural = "audit entries"

    def __repr__(self) -> str:
        return f"<AuditEntry {self.pk} {self.actor} {self.action} {self.target}>"

    __str__ = __repr__
