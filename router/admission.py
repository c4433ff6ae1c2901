"""Admission: who is calling, through which host, and may they use this model.

Every front door (OpenAI `/v1/*`, Anthropic `/v1/messages`, `/v1/models`)
admits its request here, in the same order:

 1 the process has a routing snapshot                → 503 not_ready
 2 headers, TCP peer, client address (trusted proxies: rightmost untrusted hop)
 3 Host ingress (an AppProxy circuit host, when installed)
                                                     → 404 endpoint_not_found, 401 JWT, 403 IP
 4 the key gate (not on a circuit host: the circuit's own rules apply there)
                                                     → 401 / 403 / 429
 5 model access (`Caller.check_model`)              → 403 model_not_allowed / 404 model_not_found

Before any of that, and before the body is awaited, the ASGI entry point
calls `precheck`: what the request head alone refuses (step 4's 401s on a
host that is not a circuit's), so a client without a valid key never gets to
send a body, let alone hold capacity while it does. Then the front door
parses its own body (400/413) and calls `admit`. Nothing here touches the
DB: all of it is read from the snapshot the request started with.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any, TypeAlias

from django.http import HttpRequest

from . import observe
from .core.buckets import ClientLimits
from .core.clientip import client_ip as resolve_client_ip
from .core.errors import ModelNotFound, NotReady, PathSelectorRejected, RateLimited, RouterError
from .core.snapshot import Snapshot
from .quotas import retry_after
from .request import path_selector
from .runtime import get_runtime


@dataclass(slots=True)
class Caller:
    """An admitted request: what every later stage reads about the caller."""

    snap: Snapshot
    headers: dict[str, str]  # lower-case names
    client_ip: str
    host: str
    request_id: str
    gate: Any = None  # the key gate in force (None: open, or a circuit host)
    key: Any = None  # the caller's key record, when the gate admitted one
    pinned: str | None = None  # the model a circuit host pins
    scope: str | None = None  # backend-name prefix of the circuit's own replicas

    def known(self, model: str) -> bool:
        return model == self.pinned if self.pinned is not None else self.snap.known(model)

    def check_model(self, model: str) -> None:
        """403 / 404 for a model this caller may not use (same rules everywhere)."""
        known = self.known(model)
        if self.gate is not None:
            self.gate.check_model(self.key, model, known=known)
        elif not known:
            raise ModelNotFound(f"The model '{model}' does not exist.", param="model")

    def visible(self, names: list[str]) -> list[str]:
        return self.gate.visible(self.key, names) if self.gate is not None else names


_id_prefix = secrets.token_hex(8)
_id_count = itertools.count()


def _redraw_id_prefix() -> None:
    global _id_prefix, _id_count
    _id_prefix, _id_count = secrets.token_hex(8), itertools.count()


os.register_at_fork(after_in_child=_redraw_id_prefix)


async def _within_limits(limits: ClientLimits, caller: Caller, obs: dict[str, Any] | None) -> None:
    """rate_limits: the router-wide bucket and, for a request without a key
    (open mode), its client address's; the bypass list skips both."""
    key = caller.key
    if limits.bypassed(caller.client_ip, key and key.name, key and key.id):
        return
    named = limits.items(caller.client_ip, anonymous=key is None and caller.pinned is None)
    if not named:
        return
    wait, worst = await get_runtime().quotas.take([item for item, _ in named], time.time())
    if not wait:
        return
    which = named[worst][1]
    if obs is not None:
        obs["rate_limited"] = which
    whose = "this client address's" if which == "per_ip" else "the router's"
    seconds = retry_after(wait)
    raise RateLimited(f"Rate limit reached ({whose} limit); retry in {seconds} s.",
                      headers={"Retry-After": seconds})


def new_request_id() -> str:
    """A request id for a request that brought none: 32 hex digits, as
    `uuid4().hex` was — 64 random bits drawn once per process (again in a
    forked child) and a 64-bit counter, so ids never repeat within a process
    and collide across processes with odds of 2^-64, without a `getrandom`
    syscall per request (uuid4 was ~1 % of the web process's CPU)."""
    return f"{_id_prefix}{next(_id_count):016x}"


async def ready_snapshot() -> Snapshot:
    """The current snapshot; waits (≤ 10 s) for the first one of a new process."""
    rt = get_runtime()
    if not rt.ready:
        await rt.start()
        if not await rt.wait_ready(10.0):
            raise NotReady()
    return rt.snapshot


class Call:
    """A request served without Django (router/frontends/direct.py): what
    admission reads of one is its ASGI scope (headers, the TCP peer)."""

    __slots__ = ("scope",)

    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope


Request: TypeAlias = HttpRequest | Call


def headers_of(request: Request) -> dict[str, str]:
    """Lower-case request headers straight from the ASGI scope (cheap)."""
    scope = getattr(request, "scope", None)
    if scope is not None:
        return {k.decode("latin1").lower(): v.decode("latin1") for k, v in scope["headers"]}
    assert isinstance(request, HttpRequest)
    return {k.lower(): v for k, v in request.headers.items()}


# The peer of a connection whose server gave no client address: not an IP,
# so every IP allow-list refuses it (fail closed). Only the node's own
# protocol says a client has no address because it came through the Unix
# socket ("", config/server.py UNIX_CLIENT), which the allow-lists let by.
UNKNOWN_PEER = "unknown"


def peer_of(request: Request) -> str:
    scope = getattr(request, "scope", None)
    client = scope.get("client") if scope else None
    if client:
        return client[0]
    if isinstance(request, HttpRequest):
        return request.META.get("REMOTE_ADDR") or UNKNOWN_PEER
    return UNKNOWN_PEER


def reject_path_selector(body: dict[str, Any]) -> None:
    """MIX-2: a client field may not choose the execution path."""
    field = path_selector(body)
    if field:
        raise PathSelectorRejected(
            f"'{field}' is not accepted: the router picks the execution path from the selected provider's kind.",
            param=field,
        )


def note_key(obs: dict[str, Any], key: Any) -> None:
    """The key a request ran under, in its observation: the name (shown), the
    record id (`operator:<pk>` / `coordinator:<key_id>`, what usage is
    counted by) and the source (a bounded metric label)."""
    obs["key"] = key.name
    obs["key_id"] = key.id
    obs["key_source"] = key.source


_PRECHECKED = frozenset({b"authorization", b"x-api-key"})


def precheck(scope: dict[str, Any]) -> RouterError | None:
    """The refusal a request's head decides alone, before its body is read.

    Only what needs no state: a missing, unknown or expired key where the
    key gate blocks (the gate's `identify`), and a Host that names no
    registered circuit. A circuit host is left to its circuit's own rules,
    and everything stateful (IP allowlists, rate limits) to `admit`, which
    checks the key again as ever."""
    rt = get_runtime()
    gate = rt.gate
    if not rt.ready or gate is None:
        return None
    headers: dict[str, str] = {}
    host = ""
    for name, value in scope["headers"]:
        if name in _PRECHECKED:
            headers[name.decode("latin1")] = value.decode("latin1")
        elif name == b"host":
            host = value.decode("latin1")
    ingress = rt.snapshot.ingress
    try:
        if ingress is not None and ingress.circuit_for(host) is not None:
            return None
        gate.identify(headers, time.time())
    except RouterError as refusal:
        return refusal
    return None


async def admit(
    request: Request,
    snap: Snapshot,
    *,
    headers: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    obs: dict[str, Any] | None = None,
    on_behalf: str | None = None,
) -> Caller:
    """Admit one request (steps 2–4 above); raises a RouterError to refuse it.

    `body` (the parsed request, when the door has one in OpenAI's shape) is
    checked for path selectors (MIX-2) before auth; `obs` (the request's
    observation) gets the request id and the key's name. Step 5 is
    `Caller.check_model`, called by the door with the name it serves (for
    inference: `caller.pinned or` the asked model).
    """
    if headers is None:
        headers = headers_of(request)
    client_ip = peer = peer_of(request)
    if snap.trusted_proxies:
        client_ip = resolve_client_ip(peer, headers.get("x-forwarded-for"), snap.trusted_proxies)
    caller = Caller(
        snap=snap,
        headers=headers,
        client_ip=client_ip,
        host=headers.get("host", ""),
        request_id=headers.get("x-request-id") or new_request_id(),
    )
    if obs is not None:
        obs["request_id"] = caller.request_id
    if body is not None:
        reject_path_selector(body)
    if snap.ingress is not None and on_behalf is None:
        # Host → circuit: auth (JWT, IPs) is checked here, before any fallback;
        # a registered circuit pins its canonical model, which counts as known
        # even while it has no routes (LEG-5/6/7), and scopes selection to that
        # circuit's own replicas. A circuit host is governed by its circuit's
        # own rules, the key gate by every other host (docs/appproxy.md).
        target = snap.ingress.resolve_target(caller, snap)
        if target is not None:
            caller.pinned, caller.scope = target
    if caller.pinned is None:
        gate = get_runtime().gate
        if gate is not None:
            caller.gate = gate
            try:
                if on_behalf is None:
                    caller.key = await gate.admit(headers, client_ip, time.time())
                else:
                    caller.key = await gate.admit_id(on_behalf, time.time())
            except RouterError as refusal:  # a 403/429 row still names its key
                if refusal.key is not None and obs is not None:
                    note_key(obs, refusal.key)
                raise
            if caller.key is not None and obs is not None:
                note_key(obs, caller.key)
    limits = snap.rate_limits
    if limits is not None:
        await _within_limits(limits, caller, obs)
    if obs is not None:
        # Admitted: only now may the model become a metric label, and only a
        # name this snapshot publishes (anything else is one `other` bucket).
        target = caller.pinned or obs.get("model")
        obs["label"] = observe.model_label(target, isinstance(target, str) and caller.known(target))
    return caller
