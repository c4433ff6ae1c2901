"""The ROUTER-mode events (seed §9.10, reference/router-mode.md §1.3, §1.7).

Inbound, on the same ``events_all-appproxy`` bus and envelope as circuit
events, in either format:

| event                                   | args                          | payload fields                         |
|-----------------------------------------|-------------------------------|----------------------------------------|
| ``appproxy_router_model_updated_event`` | (authority, model_json)       | target_worker_authority, model (object or JSON text) |
| ``appproxy_router_model_removed_event`` | (authority, model_name)       | target_worker_authority, model_name    |
| ``appproxy_router_key_updated_event``   | (authority, key_id)           | target_worker_authority, key_id        |
| ``appproxy_router_key_removed_event``   | (authority, key_id)           | target_worker_authority, key_id        |

Outbound ack after every apply, in the format the event came in:
``appproxy_worker_router_config_applied_event`` (authority, node_id, kind, id)
with kind ``model`` (id = primary name) or ``key`` (id = key_id).

Invariants:
- ``decode_router`` never half-parses: a body of the wrong shape raises
  ``EnvelopeError``; a key event never carries (and we never read) a secret.
- Applying goes through services.apply_event under the reconcile lock; a
  ``key_updated`` whose re-pull fails is not acked (the coordinator reports
  "deferred" and the periodic pull heals it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..envelope import WORKER_SOURCE, EnvelopeError, Event, Format, metadata_json, pack_args
from .wire import Publication, parse_publication

__all__ = [
    "ROUTER_ACK",
    "ROUTER_EVENTS",
    "RouterEvent",
    "decode_router",
    "encode_router_ack",
]

MODEL_UPDATED = "appproxy_router_model_updated_event"
MODEL_REMOVED = "appproxy_router_model_removed_event"
KEY_UPDATED = "appproxy_router_key_updated_event"
KEY_REMOVED = "appproxy_router_key_removed_event"
ROUTER_ACK = "appproxy_worker_router_config_applied_event"
ROUTER_EVENTS = frozenset({MODEL_UPDATED, MODEL_REMOVED, KEY_UPDATED, KEY_REMOVED})


@dataclass(frozen=True, slots=True)
class RouterEvent:
    name: str
    fmt: Format
    authority: str
    publication: Publication | None = None  # model_updated
    ident: str = ""  # model name (removed) or key_id

    @property
    def kind(self) -> str:
        return "model" if self.name in (MODEL_UPDATED, MODEL_REMOVED) else "key"

    @property
    def ack_id(self) -> str:
        return self.publication.model if self.publication is not None else self.ident


def _text(value: Any, what: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value:
        raise EnvelopeError(f"{what} must be a non-empty str")
    return value


def _publication(value: Any) -> Publication:
    if isinstance(value, (str, bytes)):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise EnvelopeError(f"model_json is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise EnvelopeError("model_json must be a JSON object")
    try:
        return parse_publication(value)
    except ValueError as exc:
        raise EnvelopeError(f"model_json does not validate: {exc}") from None


def decode_router(event: Event) -> RouterEvent:
    """The router fields of a decoded envelope whose name is in ROUTER_EVENTS."""
    if event.name not in ROUTER_EVENTS:
        raise EnvelopeError(f"not a router event: {event.name}")
    if event.fmt == "args":
        args = event.args or ()
        if len(args) < 2:
            raise EnvelopeError(f"{event.name} needs (authority, value) args")
        authority, value = _text(args[0], "authority"), args[1]
    else:
        body = event.payload or {}
        authority = _text(body.get("target_worker_authority"), "target_worker_authority")
        if event.name == MODEL_UPDATED:
            value = body.get("model", body.get("model_json", body.get("publication")))
        elif event.name == MODEL_REMOVED:
            value = body.get("model_name", body.get("model"))
        else:
            value = body.get("key_id", body.get("key-id"))
    if event.name == MODEL_UPDATED:
        return RouterEvent(event.name, event.fmt, authority, publication=_publication(value))
    what = "model_name" if event.name == MODEL_REMOVED else "key_id"
    return RouterEvent(event.name, event.fmt, authority, ident=_text(value, what))


def encode_router_ack(
    authority: str, node_id: str, kind: str, ident: str, fmt: Format, *, request_id: str | None = None
) -> bytes:
    """``appproxy_worker_router_config_applied_event`` in the given format."""
    msg: dict[str, Any] = {"name": ROUTER_ACK, "source": WORKER_SOURCE}
    if fmt == "payload":
        msg["payload"] = orjson.dumps(
            {"target_worker_authority": authority, "node_id": node_id, "kind": kind, "id": ident}
        ).decode()
    else:
        msg["args"] = pack_args([authority, node_id, kind, ident])
    msg["metadata"] = metadata_json(fmt, request_id)
    return orjson.dumps(msg)
