"""The Pub/Sub envelope on ``events_all-appproxy``, both formats (reference §3).

``args`` format (releases ≤26.8.x, seed §6.3)::

    {"name":…, "source":…, "args": base64(msgpack([str, …])), "metadata": "<JSON>"}

Every arg is a str; circuits and routes travel as compact JSON text inside.

``payload`` format (26.9.x and main, reference §§3.5-3.6)::

    {"name":…, "source":…, "payload": "<JSON body>", "metadata": "<JSON>"}

Invariants:
- ``decode`` never returns a half-parsed event: an undecodable envelope, or a
  known event whose body has the wrong shape, raises ``EnvelopeError`` (the
  consumer logs and drops it). Unknown names decode to an ``Event`` carrying
  just the name, authority and raw args/payload, so the caller can ignore it.
- Circuits stay plain dicts here, exactly as received, so an ack can echo them.
- ``encode_*`` emit compact JSON with keys in the reference order and a
  ``metadata`` string carrying exactly the keys the matching coordinator
  accepts (``traceparent`` only in the payload format).
- Pure: no I/O, no Django, no pydantic.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgpack
import orjson

__all__ = [
    "ACK",
    "CHANNEL",
    "CIRCUIT_EVENTS",
    "CREATED",
    "REMOVED",
    "ROUTE_UPDATED",
    "EnvelopeError",
    "Event",
    "Format",
    "decode",
    "encode_ack",
    "encode_event",
    "metadata_json",
    "pack_args",
]

CHANNEL = "events_all-appproxy"

CREATED = "appproxy_circuit_created_event"
ROUTE_UPDATED = "appproxy_circuit_route_updated_event"
REMOVED = "appproxy_circuit_removed_event"
ACK = "appproxy_worker_circuit_added_event"
CIRCUIT_EVENTS = frozenset({CREATED, ROUTE_UPDATED, REMOVED, ACK})
# Events whose body is (authority, [circuit, …]).
_LIST_EVENTS = frozenset({CREATED, REMOVED, ACK})

Format = Literal["args", "payload"]
FORMATS: tuple[Format, ...] = ("args", "payload")

WORKER_SOURCE = "appproxy-worker"
COORDINATOR_SOURCE = "appproxy-coordinator"


class EnvelopeError(ValueError):
    """The message is not a decodable AppProxy event; log it and drop it."""


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    fmt: Format
    authority: str | None = None
    # created / removed / ack: the circuit objects exactly as received.
    circuits: list[dict[str, Any]] = field(default_factory=list)
    # route_updated only: the circuit object and the full new route list.
    circuit: dict[str, Any] | None = None
    routes: list[dict[str, Any]] | None = None
    source: str | None = None
    # The metadata JSON string as received (None when absent) and its parse
    # (None when absent or not a JSON object; metadata is never required).
    metadata_raw: str | None = None
    metadata: dict[str, Any] | None = None
    # The decoded body: args tuple (args format) or payload object.
    args: tuple[Any, ...] | None = None
    payload: dict[str, Any] | None = None

    @property
    def known(self) -> bool:
        return self.name in CIRCUIT_EVENTS

    @property
    def circuit_ids(self) -> list[str]:
        items = self.circuits if self.circuit is None else [self.circuit]
        return [str(c.get("id")) for c in items]

    @property
    def request_id(self) -> str | None:
        rid = (self.metadata or {}).get("request_id")
        return rid if isinstance(rid, str) else None


# -- decoding ---------------------------------------------------------------


def _json(text: Any, what: str) -> Any:
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text)
    elif not isinstance(text, str):
        raise EnvelopeError(f"{what} must be a JSON string, got {type(text).__name__}")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(f"{what} is not valid JSON: {exc}") from exc


def _objects(value: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise EnvelopeError(f"{what} must be a JSON array, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise EnvelopeError(f"{what}[{i}] must be a JSON object")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise EnvelopeError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _decode_args(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, str):
        raise EnvelopeError("'args' must be a base64 string")
    try:
        packed = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeError(f"'args' is not valid base64: {exc}") from exc
    try:
        args = msgpack.unpackb(packed, raw=False, use_list=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise EnvelopeError(f"'args' is not valid msgpack: {exc}") from exc
    if not isinstance(args, tuple):
        raise EnvelopeError("'args' must pack a msgpack array")
    return args


def _str_arg(args: tuple[Any, ...], index: int, what: str) -> str:
    if len(args) <= index:
        raise EnvelopeError(f"missing arg {index} ({what})")
    value = args[index]
    if not isinstance(value, str):
        raise EnvelopeError(f"arg {index} ({what}) must be a str")
    return value


def decode(raw: bytes | bytearray | memoryview | str) -> Event:
    """Decode one Pub/Sub message in either format; see the module docstring."""
    msg = _json(raw, "message")
    if not isinstance(msg, dict):
        raise EnvelopeError("message must be a JSON object")
    name = msg.get("name")
    if not isinstance(name, str) or not name:
        raise EnvelopeError("message has no event 'name'")
    source = msg.get("source")
    source = source if isinstance(source, str) else None

    metadata_raw: str | None = None
    metadata: dict[str, Any] | None = None
    meta = msg.get("metadata")
    if isinstance(meta, str):
        metadata_raw = meta
        try:
            parsed = orjson.loads(meta)
        except orjson.JSONDecodeError:
            parsed = None
        metadata = parsed if isinstance(parsed, dict) else None
    elif isinstance(meta, dict):
        metadata_raw, metadata = orjson.dumps(meta).decode(), meta

    common: dict[str, Any] = {
        "name": name,
        "source": source,
        "metadata_raw": metadata_raw,
        "metadata": metadata,
    }
    if "payload" in msg:
        body = msg["payload"]
        payload = body if isinstance(body, dict) else _json(body, "'payload'")
        payload = _object(payload, "'payload'")
        return _from_payload(payload, common)
    if "args" in msg:
        return _from_args(_decode_args(msg["args"]), common)
    raise EnvelopeError("message has neither 'args' nor 'payload'")


def _from_args(args: tuple[Any, ...], common: dict[str, Any]) -> Event:
    name = common["name"]
    if name in _LIST_EVENTS:
        authority = _str_arg(args, 0, "authority")
        circuits = _objects(_json(_str_arg(args, 1, "circuits"), "circuits"), "circuits")
        return Event(fmt="args", authority=authority, circuits=circuits, args=args, **common)
    if name == ROUTE_UPDATED:
        authority = _str_arg(args, 0, "authority")
        circuit = _object(_json(_str_arg(args, 1, "circuit"), "circuit"), "circuit")
        routes = _objects(_json(_str_arg(args, 2, "routes"), "routes"), "routes")
        return Event(
            fmt="args",
            authority=authority,
            circuit=circuit,
            routes=routes,
            args=args,
            **common,
        )
    first = args[0] if args and isinstance(args[0], str) else None
    return Event(fmt="args", authority=first, args=args, **common)


def _from_payload(payload: dict[str, Any], common: dict[str, Any]) -> Event:
    name = common["name"]
    value = payload.get("target_worker_authority")
    authority = value if isinstance(value, str) else None
    if name in CIRCUIT_EVENTS and authority is None:
        raise EnvelopeError("'target_worker_authority' must be a str")
    if name in _LIST_EVENTS:
        circuits = _objects(payload.get("circuits"), "circuits")
        return Event(
            fmt="payload",
            authority=authority,
            circuits=circuits,
            payload=payload,
            **common,
        )
    if name == ROUTE_UPDATED:
        circuit = _object(payload.get("circuit"), "circuit")
        routes = _objects(payload.get("routes"), "routes")
        return Event(
            fmt="payload",
            authority=authority,
            circuit=circuit,
            routes=routes,
            payload=payload,
            **common,
        )
    return Event(fmt="payload", authority=authority, payload=payload, **common)


# -- encoding ---------------------------------------------------------------


def metadata_json(fmt: Format, request_id: str | None = None) -> str:
    """The metadata string each coordinator generation accepts, exactly."""
    meta: dict[str, Any] = {
        "request_id": request_id,
        "user": None,
        "triggered_user": None,
    }
    if fmt == "payload":
        meta["traceparent"] = None
    return orjson.dumps(meta).decode()


def pack_args(args: Sequence[str]) -> str:
    """base64(msgpack([str, …])): the ``args`` field of the legacy format."""
    packed = msgpack.packb(list(args), use_bin_type=True)
    return base64.b64encode(packed).decode("ascii")


_pack_args = pack_args


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode()


def encode_event(
    name: str,
    fmt: Format,
    *,
    authority: str,
    circuits: Sequence[Mapping[str, Any]] | None = None,
    circuit: Mapping[str, Any] | None = None,
    routes: Sequence[Mapping[str, Any]] | None = None,
    source: str = COORDINATOR_SOURCE,
    request_id: str | None = None,
) -> bytes:
    """Encode a circuit event: created/removed/ack take ``circuits``,
    route_updated takes ``circuit`` and ``routes`` (the full new set)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown event format {fmt!r}; use 'args' or 'payload'")
    body: dict[str, Any] = {"target_worker_authority": authority}
    if name in _LIST_EVENTS:
        if circuits is None or circuit is not None or routes is not None:
            raise ValueError(f"{name} takes circuits=[…] only")
        body["circuits"] = [dict(c) for c in circuits]
    elif name == ROUTE_UPDATED:
        if circuit is None or routes is None or circuits is not None:
            raise ValueError(f"{name} takes circuit={{…}} and routes=[…]")
        body["circuit"] = dict(circuit)
        body["routes"] = [dict(r) for r in routes]
    else:
        raise ValueError(f"not a circuit event: {name!r}")

    msg: dict[str, Any] = {"name": name, "source": source}
    if fmt == "payload":
        msg["payload"] = _compact(body)
    else:
        msg["args"] = _pack_args(
            [
                authority,
                *(_compact(v) for k, v in body.items() if k != "target_worker_authority"),
            ]
        )
    msg["metadata"] = metadata_json(fmt, request_id)
    return orjson.dumps(msg)


def encode_ack(
    authority: str,
    circuits: Sequence[Mapping[str, Any]],
    fmt: Format,
    *,
    request_id: str | None = None,
) -> bytes:
    """``appproxy_worker_circuit_added_event`` echoing the complete circuits."""
    return encode_event(
        ACK,
        fmt,
        authority=authority,
        circuits=circuits,
        source=WORKER_SOURCE,
        request_id=request_id,
    )
