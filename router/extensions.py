"""What the data plane needs from the apps above it, and where they plug in.

`router` imports neither `keys` nor `appproxy` (an import contract in
`make lint` keeps it so). It declares here, as small protocols, what it asks
of them; each app registers its implementation from its `AppConfig.ready()`,
which Django runs once per process after every app is loaded:

- a key-gate factory: routing snapshot → the gate every /v1 request passes
  (`keys`); with none registered the router is open (no key is checked);
- snapshot parts: extra fields of the routing Snapshot compiled from the
  document (the keyring from `keys`, the Host ingress table from `appproxy`),
  each naming the change-log topics it depends on (router/revision.py) and,
  optionally, how to update its value in place from the changed names;
- YAML section validators: a top-level section the router keeps raw
  (`appproxy`, `appproxy_router`) is validated by the app that owns it;
- readiness checks (/readyz) and status sections (/status);
- `manage.py doctor` checks (node/doctor.py): an app adds the checks of
  what it owns (the coordinator, the wildcard domain) next to the core ones;
- body resolvers: an admitted OpenAI-door request whose raw body contains a
  resolver's marker bytes is handed to it, and may come back rewritten
  (`filestore`: the caller's file ids → inline data). A request without
  the marker pays one bytes search, and nothing with no resolver registered;
- an answer keeper per OpenAI-door endpoint: it sees each admitted request
  of its endpoint before the body resolvers, may widen the body with what it
  kept before (`responsestore`: `previous_response_id` → the conversation),
  and is handed the routed answer to keep once it is complete.

Invariants: registration happens during app loading only and is idempotent
(the same name registered again replaces the entry, so a reloaded app never
registers twice); after that the registry is only read. Entries keep the
order they were registered in (INSTALLED_APPS order), which fixes the order
of readiness checks and status sections in the responses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .core.snapshot import Snapshot

__all__ = [
    "AnswerKeeper",
    "BodyResolver",
    "DoctorCheck",
    "GateFactory",
    "IngressRequest",
    "IngressResolver",
    "Kept",
    "KeyGate",
    "PartSpec",
    "ReadinessCheck",
    "SectionValidator",
    "SnapshotPart",
    "StatusSection",
    "answer_keeper",
    "body_resolvers",
    "doctor_checks",
    "gate_factory",
    "readiness_checks",
    "register_answer_keeper",
    "register_body_resolver",
    "register_doctor_check",
    "register_gate_factory",
    "register_readiness",
    "register_section_validator",
    "register_snapshot_part",
    "register_status_section",
    "section_validator",
    "snapshot_parts",
    "status_sections",
]


class KeyGate(Protocol):
    """The API-key gate of one snapshot (keys.gate.KeyGate)."""

    async def admit(self, headers: Mapping[str, str], client_ip: str, now: float) -> Any | None:
        """The key a request runs under (None = anonymous). Raises a RouterError on refusal."""
        ...

    async def admit_id(self, key_id: str, now: float, *, count: bool = True) -> Any | None:
        """The key a queued job (a batch line) runs under, by its record id
        ("" = anonymous); the refusals of `admit` but the IP allowlist's
        (`count` False: not counted against the key's rate limit)."""
        ...

    def identify(self, headers: Mapping[str, str], now: float) -> None:
        """Before the body: raises the 401 a blocking gate gives a missing,
        unknown or expired key; no state is read or counted."""
        ...

    def check_model(self, key: Any | None, name: str, *, known: bool) -> None:
        """404 for an unknown model name, 403 outside the key's allowlist."""
        ...

    def visible(self, key: Any | None, names: Iterable[str]) -> list[str]:
        """The model names a key may see, in the given order."""
        ...


class GateFactory(Protocol):
    """Builds the gate of a new snapshot. `previous` is the gate it replaces
    (None at the first install), so state that must survive a reload — the
    rate limiter's windows — can be carried over."""

    def __call__(self, snap: Snapshot, previous: KeyGate | None) -> KeyGate | None: ...


class IngressRequest(Protocol):
    """What an ingress resolver reads of a request."""

    host: str
    headers: Mapping[str, str]
    client_ip: str


class IngressResolver(Protocol):
    """`Snapshot.ingress`: Host → a pinned model (appproxy.legacy.ingress.Ingress)."""

    def resolve(self, env: IngressRequest, snap: Snapshot | None = None) -> str | None: ...

    def resolve_target(self, env: IngressRequest, snap: Snapshot | None = None) -> tuple[str, str] | None:
        """(model, backend-name prefix that scopes selection) or None for plain routing."""
        ...

    # Backends reachable only by a request scoped to them (a private circuit's
    # replicas through its own Host): never selected, known or listed by a
    # request with no scope (router.core.snapshot: open_group, hidden_names).
    @property
    def confined(self) -> frozenset[str]:
        """Their scopes (backend-name prefixes); empty: nothing is confined."""
        ...

    @property
    def confined_models(self) -> frozenset[str]:
        """The model names they serve."""
        ...

    def confines(self, backend: str) -> bool: ...


# Compiles one Snapshot field from the validated routing document
# (router.config_schema.RouterFile); runs in a worker thread, may use the ORM.
SnapshotPart = Callable[[Any], Any]
# Updates one Snapshot field in place: (its previous value, {topic: changed
# names} of its topics, the routing document) → the new value.
PartUpdate = Callable[[Any, Mapping[str, frozenset[str]], Any], Any]
# Validates one raw top-level YAML section; raises ValueError or a pydantic
# error whose message names the bad key.
SectionValidator = Callable[[Any], None]
# name → passed, for /readyz; empty when the app has nothing to wait for.
ReadinessCheck = Callable[[Snapshot], Mapping[str, bool]]
# One /status section (never a secret).
StatusSection = Callable[[Snapshot], Any]
# One `manage.py doctor` check: the doctor's context (node.doctor.Context:
# the validated YAML, whether the DB is ready, whether to probe) → its
# results (node.doctor.Result). Never prints a secret's value.
DoctorCheck = Callable[[Any], Iterable[Any]]



class BodyResolver(Protocol):
    """Rewrites an admitted request's parsed body before it is routed.

    `caller` is the request's admission.Caller; returns the new body (a
    fresh object: the given one is never changed) or None to keep it.
    Raises a RouterError to refuse the request. May use the DB: only the
    requests that carry its marker ever reach it."""

    async def __call__(self, caller: Any, endpoint: str, body: dict[str, Any]) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Kept:
    """What an answer keeper made of one request."""

    # The body to route instead of the client's (None: as sent); the door
    # holds it to server.max_body_bytes like any other body.
    body: dict[str, Any] | None = None
    # Handed the request's `pipeline.Routed` before it is rendered; it may
    # wrap `routed.provider` to see the answer as it passes (never delay it).
    keep: Callable[[Any], None] | None = None


class AnswerKeeper(Protocol):
    """Keeps what one endpoint answered, for later requests to build on.

    Called with the admitted `caller` and the parsed body as the client sent
    it (never changed); returns None to leave the request alone. Raises a
    RouterError to refuse it. May use the DB off the event loop, but only
    for requests that ask for something kept: every request of its endpoint
    reaches it."""

    async def __call__(self, caller: Any, body: dict[str, Any]) -> Kept | None: ...


_gate_factory: GateFactory | None = None

@dataclass(frozen=True, slots=True)
class PartSpec:
    compile: SnapshotPart
    # The change-log topics the value depends on ("document" when it reads the
    # routing document); None: it may depend on anything, recompiled at every
    # revision.
    topics: frozenset[str] | None = None
    # None: compiled again when one of its topics changed.
    update: PartUpdate | None = None
    # Read only by the request path (the key gate): a process that serves no
    # request (the tasks process) leaves the field at its default.
    requests_only: bool = False


_snapshot_parts: dict[str, PartSpec] = {}
_section_validators: dict[str, SectionValidator] = {}
_readiness: dict[str, ReadinessCheck] = {}
_status: dict[str, StatusSection] = {}
_doctor: dict[str, DoctorCheck] = {}
_body_resolvers: dict[str, tuple[bytes, BodyResolver]] = {}
_body_resolver_list: tuple[tuple[bytes, BodyResolver], ...] = ()
_answer_keepers: dict[str, AnswerKeeper] = {}


def register_gate_factory(factory: GateFactory) -> None:
    global _gate_factory
    _gate_factory = factory


def gate_factory() -> GateFactory | None:
    return _gate_factory


def register_snapshot_part(
    field: str,
    compile: SnapshotPart,
    *,
    topics: Iterable[str] | None = None,
    update: PartUpdate | None = None,
    requests_only: bool = False,
) -> None:
    """`field` names a Snapshot field (e.g. "keyring", "ingress");
    `requests_only`: only the request path reads it (see PartSpec)."""
    if field not in Snapshot.__dataclass_fields__:
        raise ValueError(f"Snapshot has no field {field!r}")
    _snapshot_parts[field] = PartSpec(compile, None if topics is None else frozenset(topics), update, requests_only)


def snapshot_parts(*, serving: bool = True) -> Mapping[str, PartSpec]:
    """The registered parts; `serving=False`: those a process that serves no
    request needs (not the requests-only ones)."""
    if serving:
        return _snapshot_parts
    return {name: part for name, part in _snapshot_parts.items() if not part.requests_only}


def register_section_validator(section: str, validate: SectionValidator) -> None:
    _section_validators[section] = validate


def section_validator(section: str) -> SectionValidator | None:
    return _section_validators.get(section)


def register_readiness(name: str, check: ReadinessCheck) -> None:
    _readiness[name] = check


def readiness_checks() -> Iterable[ReadinessCheck]:
    return tuple(_readiness.values())


def register_status_section(name: str, section: StatusSection) -> None:
    """`name` is the key of the section in the /status body."""
    _status[name] = section


def status_sections() -> Mapping[str, StatusSection]:
    return _status


def register_doctor_check(name: str, check: DoctorCheck) -> None:
    """`name` is the group the check's results are listed under (e.g. "appproxy")."""
    _doctor[name] = check


def doctor_checks() -> Mapping[str, DoctorCheck]:
    return _doctor


def register_body_resolver(name: str, marker: bytes, resolve: BodyResolver) -> None:
    """`resolve` sees only the request bodies in which `marker` occurs."""
    global _body_resolver_list
    _body_resolvers[name] = (marker, resolve)
    _body_resolver_list = tuple(_body_resolvers.values())


def body_resolvers() -> tuple[tuple[bytes, BodyResolver], ...]:
    return _body_resolver_list


def register_answer_keeper(endpoint: str, keeper: AnswerKeeper) -> None:
    """`keeper` sees every admitted OpenAI-door request of `endpoint` ("responses")."""
    _answer_keepers[endpoint] = keeper


def answer_keeper(endpoint: str) -> AnswerKeeper | None:
    return _answer_keepers.get(endpoint)
