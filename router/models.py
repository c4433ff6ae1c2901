"""The DB mirror of routing state. Web processes never read it per request:
they compile an immutable snapshot from it when the revision changes.

Ownership: a writer only adds/updates/removes rows of its own `source`
(config: the YAML loader; admin: operators; appproxy: the reconcile).
"""

from __future__ import annotations

from django.db import models as dj

from .core.backend import masked_url


class Source(dj.TextChoices):
    CONFIG = "config", "config (YAML)"
    ADMIN = "admin", "admin"
    APPPROXY = "appproxy", "appproxy"


class Backend(dj.Model):
    name = dj.CharField(max_length=200, unique=True)
    source = dj.CharField(max_length=16, choices=Source.choices, default=Source.ADMIN)
    url = dj.CharField(max_length=500)
    kind = dj.CharField(max_length=32, default="openai_compat")
    models = dj.JSONField(default=list, help_text="Client-facing model names and aliases.")
    served_model = dj.CharField(max_length=300, blank=True, default="")
    weight = dj.PositiveIntegerField(default=100)
    capacity = dj.PositiveIntegerField(null=True, blank=True)
    priority = dj.IntegerField(default=0)
    # A literal or a ${ENV_VAR} template; config rows keep the template so the
    # DB never holds a config secret. Never shown back to an operator.
    api_key = dj.CharField(max_length=500, blank=True, default="")
    connect_timeout = dj.FloatField(default=5.0)
    read_timeout = dj.FloatField(default=600.0)
    extra = dj.JSONField(default=dict, blank=True)
    # An operator's drain (router/drain.py): no new request is sent to the
    # backend, its config and its health probe stay. Set by no source's
    # writer: the YAML sync and the AppProxy reconcile write their own
    # fields only, so a reload keeps it while the row lives.
    drained = dj.BooleanField(default=False, help_text="No new requests (an operator's drain); config and probes stay.")
    updated_at = dj.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["source", "name"]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:  # never the api_key, never the URL's userinfo
        return f"<Backend {self.name} {self.source} {masked_url(self.url)}>"


class ConfigDocument(dj.Model):
    """The validated YAML (minus backends), as last applied; one row."""

    path = dj.CharField(max_length=500, blank=True, default="")
    digest = dj.CharField(max_length=64, blank=True, default="")
    document = dj.JSONField(default=dict)
    applied_at = dj.DateTimeField(auto_now=True)


class ConfigVersion(dj.Model):
    """One applied YAML text: the config's history (router/config_history.py).

    Written in the transaction that applies the text, by whichever writer
    applied it (the file watch: source "file"; the admin API: "api"), so a
    version exists exactly when its text reached the mirror. The newest
    `ROUTER_CONFIG_VERSIONS` are kept. `text` is the file as written: it may
    hold literal secrets, like the file; readers show it masked.
    """

    number = dj.PositiveIntegerField(unique=True)
    created_at = dj.DateTimeField(auto_now_add=True)
    source = dj.CharField(max_length=16, default="file")
    actor = dj.CharField(max_length=250, blank=True, default="")
    note = dj.CharField(max_length=200, blank=True, default="")
    path = dj.CharField(max_length=500, blank=True, default="")
    digest = dj.CharField(max_length=64)
    text = dj.TextField()

    class Meta:
        ordering = ["-number"]

    def __repr__(self) -> str:  # never the text
        return f"<ConfigVersion {self.number} {self.source} {self.actor}>"


class RoutingRevision(dj.Model):
    """A counter bumped by every committed change; one row (pk=1)."""

    revision = dj.BigIntegerField(default=0)
    reason = dj.CharField(max_length=200, blank=True, default="")
    updated_at = dj.DateTimeField(auto_now=True)


class RoutingChange(dj.Model):
    """What one revision changed, by topic and name: the change log from which
    every web process updates its snapshot in place (router/selectors.py).

    A revision whose writer did not say what it changed carries one row of
    topic "*": readers compile that revision from scratch. Old rows are pruned
    (router/revision.py); a reader too far behind compiles from scratch.
    """

    revision = dj.BigIntegerField(db_index=True)
    topic = dj.CharField(max_length=32)
    name = dj.CharField(max_length=300, blank=True, default="")

    def __repr__(self) -> str:
        return f"<RoutingChange r{self.revision} {self.topic} {self.name}>"
