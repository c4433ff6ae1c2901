"""API keys: operator-issued and coordinator-mirrored, one table, one gate.

Only the SHA-256 digest (`key_hash`) and a masked `hint` are stored; the
plaintext exists once, in the return value of `keys.services.key_create`.
Ownership: operators (admin, commands, dashboard) write `operator` rows;
`coordinator` rows (keyed by `key_id`) belong to the AppProxy coordinator —
only keys.coordinator writes them (the ROUTER worker) — and the operator paths only ever
show them. Web processes never read this table per request:
`keys.selectors.compile_keyring` compiles it into the routing snapshot.
"""

from __future__ import annotations

from django.db import models


class KeySource(models.TextChoices):
    OPERATOR = "operator", "operator"
    COORDINATOR = "coordinator", "coordinator"


class ApiKey(models.Model):
    name = models.CharField(max_length=200)
    owner = models.CharField(max_length=200, blank=True, default="")
    source = models.CharField(
        max_length=16, choices=KeySource.choices, default=KeySource.OPERATOR
    )
    key_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="The coordinator's key id (blank for operator keys).",
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(max_length=32, blank=True, default="", editable=False)
    allowed_models = models.JSONField(
        default=list,
        blank=True,
        help_text="Model names and aliases; empty = every model.",
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    rate_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute; empty = unlimited."
    )
    allowed_client_ips = models.JSONField(
        default=list,
        blank=True,
        help_text="IPs or CIDRs (IPv4/IPv6); empty = any address.",
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Reversible, unlike revoked_at: a disabled key is out of the keyring
    # (401 invalid_api_key) until it is enabled again (keys.services.key_set_enabled).
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("source", "name", "-created_at")
        verbose_name = "API key"
        constraints = (
            models.UniqueConstraint(
                fields=("key_id",),
                condition=models.Q(source="coordinator"),
                name="keys_apikey_coordinator_key_id_unique",
            ),
        )
        # revokeapikey --name and the dashboard find an operator key by name:
        # without it a scan of 100,000 rows (~13 ms CPU per revocation at that size).
        indexes = (models.Index(fields=("source", "name"), name="keys_apikey_source_name"),)

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_enabled(self) -> bool:
        return self.disabled_at is None

    @property
    def display_hint(self) -> str:
        return self.hint or (f"id:{self.key_id}" if self.key_id else "")

    def __str__(self) -> str:
        return f"{self.name} ({self.display_hint})" if self.display_hint else self.name

    def __repr__(self) -> str:  # never the hash
        state = " revoked" if self.revoked_at else (" disabled" if self.disabled_at else "")
        return (
            f"<ApiKey {self.pk} {self.name!r} {self.source} {self.display_hint}{state}>"
        )


class KeyUsage(models.Model):
    """One key's usage in one UTC hour, folded from the router's Redis buffer
    (router/usage.py) by keys.tasks.fold_usage. `key_ref` is the key record's
    id ("operator:<pk>" | "coordinator:<key_id>"), kept as a string so the
    history outlives the key row."""

    key_ref = models.CharField(max_length=255)
    source = models.CharField(max_length=16, blank=True, default="")
    name = models.CharField(max_length=200, blank=True, default="", help_text="The key's name when last seen.")
    hour = models.DateTimeField(help_text="Start of the UTC hour.")
    requests = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0, help_text="Answers with status >= 400.")
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cache_hits = models.PositiveBigIntegerField(
        default=0, help_text="Requests answered from the response cache (counted in requests too)."
    )
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-hour", "key_ref")
        verbose_name = "key usage"
        verbose_name_plural = "key usage"
        constraints = (models.UniqueConstraint(fields=("key_ref", "hour"), name="keys_keyusage_key_hour_unique"),)
        indexes = (models.Index(fields=("hour",), name="keys_keyusage_hour"),)

    def __str__(self) -> str:
        return f"{self.name or self.key_ref} @ {self.hour:%Y-%m-%d %H}:00 UTC"


class UsageFold(models.Model):
    """A Redis buffer hash already folded into KeyUsage (its claimed name),
    written in the fold's transaction: a fold that died after its commit but
    before deleting the hash never counts it twice."""

    name = models.CharField(max_length=300, unique=True)
    folded_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return self.name
