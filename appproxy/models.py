"""The AppProxy mirror: what the coordinator told this node, for operators
and for the web processes' snapshot compile.

Not an authority: the coordinator is. The tasks and events processes write
these rows (always under the reconcile lock, in one transaction with the
``source=appproxy`` Backend rows they imply); web processes read them only
when compiling a snapshot, never per request. No secret is stored here.
"""

from __future__ import annotations

from django.db import models as dj

# Change-log topics (router.revision.touch) of the rows below: writers name
# what they wrote; the snapshot parts that read these rows (the Host ingress
# table, the published names, the worker facts) are compiled again when one
# of their topics is named.
CIRCUIT = "circuit"  # Circuit, by circuit id
PUBLICATION = "publication"  # Publication, by model
WORKER = "worker"  # WorkerState (registration, first pull)


class Circuit(dj.Model):
    circuit_id = dj.CharField(max_length=36, unique=True, help_text="The coordinator's circuit UUID (the JWT id).")
    subdomain = dj.CharField(max_length=253, blank=True, default="", db_index=True)
    app = dj.CharField(max_length=200, blank=True, default="")
    app_mode = dj.CharField(max_length=16, blank=True, default="inference")
    model = dj.CharField(
        max_length=300, blank=True, default="", help_text="Discovered from a replica's /v1/models; blank until known."
    )
    model_discovered_at = dj.DateTimeField(null=True, blank=True)
    endpoint_id = dj.CharField(max_length=36, blank=True, default="", db_index=True)
    open_to_public = dj.BooleanField(default=False)
    allowed_client_ips = dj.TextField(null=True, blank=True)
    runtime_variant = dj.CharField(max_length=64, blank=True, default="")
    raw = dj.JSONField(default=dict, help_text="The complete circuit object as last received.")
    created_at = dj.DateTimeField(auto_now_add=True)
    updated_at = dj.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["subdomain", "circuit_id"]

    def __str__(self) -> str:
        return self.subdomain or self.circuit_id

    @property
    def model_key(self) -> str:
        """Key of the discovered-model cache (wire.Circuit.model_key)."""
        return self.endpoint_id or self.circuit_id


class Route(dj.Model):
    circuit = dj.ForeignKey(Circuit, on_delete=dj.CASCADE, related_name="routes")
    route_id = dj.CharField(max_length=36, blank=True, default="")
    session_id = dj.CharField(max_length=36, blank=True, default="")
    session_name = dj.CharField(max_length=200, blank=True, default="")
    kernel_host = dj.CharField(max_length=255, blank=True, default="")
    kernel_port = dj.PositiveIntegerField()
    protocol = dj.CharField(max_length=16, blank=True, default="http")
    traffic_ratio = dj.FloatField(default=1.0)
    backend_name = dj.CharField(max_length=200, blank=True, default="", help_text="Blank when it yields no backend.")

    class Meta:
        ordering = ["circuit_id", "pk"]

    def __str__(self) -> str:
        return f"{self.kernel_host or 'localhost'}:{self.kernel_port}"


class WorkerState(dj.Model):
    """One node's registration under one authority: a row per (authority,
    node_id), so nodes that share a database never take turns registering.

    ``node_id`` is the node session's id (appproxy.node: a fresh uuid4 per
    node start, never reused); rows of nodes gone quiet are pruned at
    registration. ``worker_id`` blank = register (again)."""

    authority = dj.CharField(max_length=200)
    worker_id = dj.CharField(max_length=36, blank=True, default="")
    node_id = dj.CharField(max_length=64, blank=True, default="")
    mode = dj.CharField(max_length=16, blank=True, default="wildcard")
    # ROUTER mode: the last applied router-config revision (opaque; blank =
    # none, the next pull omits known_revision) and the pull outcomes.
    revision = dj.CharField(max_length=200, blank=True, default="")
    last_pull_result = dj.CharField(max_length=32, blank=True, default="")
    pulls_full = dj.PositiveIntegerField(default=0)
    pulls_unchanged = dj.PositiveIntegerField(default=0)
    registered_at = dj.DateTimeField(null=True, blank=True)
    last_heartbeat_at = dj.DateTimeField(null=True, blank=True)
    last_pull_at = dj.DateTimeField(null=True, blank=True)
    first_pull_applied = dj.BooleanField(default=False)
    pull_requested_at = dj.DateTimeField(null=True, blank=True)
    status = dj.CharField(max_length=32, blank=True, default="new")
    last_error = dj.TextField(blank=True, default="")
    failures = dj.PositiveIntegerField(default=0, help_text="Consecutive failed coordinator calls.")
    retry_at = dj.DateTimeField(null=True, blank=True, help_text="No coordinator call before this (backoff).")
    circuits = dj.PositiveIntegerField(default=0)
    updated_at = dj.DateTimeField(auto_now=True)

    class Meta:
        constraints = (dj.UniqueConstraint(fields=("authority", "node_id"), name="appproxy_workerstate_node"),)

    def __str__(self) -> str:
        return f"{self.authority} ({self.node_id[:8] or '-'})"

    def with_unchanged_pulls(self) -> WorkerState:
        """This row with the unchanged pulls kept in Redis (appproxy.pulls)
        overlaid, in memory: the pull time and count a reader should show."""
        from .pulls import overlay

        return overlay(self)


class Publication(dj.Model):
    """A ROUTER-mode model publication as the coordinator last sent it
    (seed §9.2): a primary name, aliases, endpoint mappings. No secret."""

    authority = dj.CharField(max_length=200)
    model = dj.CharField(max_length=300)
    aliases = dj.JSONField(default=list, blank=True)
    mappings = dj.JSONField(default=list, blank=True, help_text="[{endpoint_id, ratio}] as received.")
    control_mode = dj.CharField(max_length=32, blank=True, default="manual")
    revision = dj.CharField(max_length=200, blank=True, default="", help_text="Snapshot revision it came with.")
    updated_at = dj.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]
        constraints = (dj.UniqueConstraint(fields=("authority", "model"), name="appproxy_publication_model"),)

    def __str__(self) -> str:
        return self.model


class EventRecord(dj.Model):
    """One coordinator event this node received (the newest ~500 are kept)."""

    name = dj.CharField(max_length=100)
    fmt = dj.CharField(max_length=16, blank=True, default="")
    authority = dj.CharField(max_length=200, blank=True, default="")
    circuit_ids = dj.JSONField(default=list, blank=True)
    received_at = dj.DateTimeField()
    applied_at = dj.DateTimeField(null=True, blank=True)
    acked_at = dj.DateTimeField(null=True, blank=True)
    ok = dj.BooleanField(null=True)
    detail = dj.TextField(blank=True, default="")

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"{self.name} @ {self.received_at:%H:%M:%S}"
