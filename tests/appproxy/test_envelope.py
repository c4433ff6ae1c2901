"""Both broadcast envelopes: byte-exact encoding, round trips, malformed input."""

from __future__ import annotations

import base64

import msgpack
import orjson
import pytest

from appproxy import envelope
from appproxy.envelope import (
    ACK,
    CREATED,
    REMOVED,
    ROUTE_UPDATED,
    EnvelopeError,
    decode,
    encode_ack,
    encode_event,
)

from .test_wire import CID, circuit_dict

ROUTE = circuit_dict()["route_info"][0]


def test_worked_example_is_byte_exact() -> None:
    """('worker01','[]') packs to 92 a8 … a2 5b5d, base64 kqh3b3JrZXIwMaJbXQ== (§3.4)."""
    packed = msgpack.packb(["worker01", "[]"], use_bin_type=True)
    assert packed.hex() == "92a8776f726b65723031a25b5d"
    assert base64.b64encode(packed) == b"kqh3b3JrZXIwMaJbXQ=="
    assert encode_ack("worker01", [], "args") == (
        b'{"name":"appproxy_worker_circuit_added_event",'
        b'"source":"appproxy-worker",'
        b'"args":"kqh3b3JrZXIwMaJbXQ==",'
        b'"metadata":"{\\"request_id\\":null,\\"user\\":null,\\"triggered_user\\":null}"}'
    )


def test_a_long_circuit_list_uses_str16_like_the_reference() -> None:
    """A 539-byte circuits JSON packs as `92 a8 "worker01" da 02 1b "[{"id":…` (§3.4)."""
    circuit = circuit_dict(route_info=[], runtime_variant=None)
    base_len = len(orjson.dumps([circuit]))
    assert base_len < 539
    circuit["app"] += "x" * (539 - base_len)
    assert len(orjson.dumps([circuit])) == 539
    msg = orjson.loads(encode_ack("worker01", [circuit], "args"))
    packed = base64.b64decode(msg["args"])
    assert packed[:13] == bytes.fromhex("92a8776f726b65723031da021b")
    assert packed[13:21] == b'[{"id":"'
    assert msg["args"].startswith("kqh3b3JrZXIwMdoCG1t7")


def test_metadata_carries_exactly_the_keys_each_coordinator_accepts() -> None:
    args_msg = orjson.loads(encode_ack("w", [], "args"))
    payload_msg = orjson.loads(encode_ack("w", [], "payload"))
    assert args_msg["metadata"] == ('{"request_id":null,"user":null,"triggered_user":null}')
    assert payload_msg["metadata"] == ('{"request_id":null,"user":null,"triggered_user":null,"traceparent":null}')
    assert list(args_msg) == ["name", "source", "args", "metadata"]
    assert list(payload_msg) == ["name", "source", "payload", "metadata"]


def test_ack_echoes_the_request_id_when_given() -> None:
    msg = orjson.loads(encode_ack("w", [], "payload", request_id="r-1"))
    assert orjson.loads(msg["metadata"])["request_id"] == "r-1"


def test_payload_format_body_shape() -> None:
    msg = orjson.loads(encode_ack("worker01", [circuit_dict()], "payload"))
    assert msg["source"] == "appproxy-worker"
    assert orjson.loads(msg["payload"]) == {
        "target_worker_authority": "worker01",
        "circuits": [circuit_dict()],
    }


@pytest.mark.parametrize("fmt", ["args", "payload"])
@pytest.mark.parametrize("name", [CREATED, REMOVED, ACK])
def test_list_events_round_trip(fmt: str, name: str) -> None:
    circuits = [circuit_dict(), circuit_dict(id="00000000-0000-4000-8000-000000000001")]
    event = decode(encode_event(name, fmt, authority="w1", circuits=circuits))  # type: ignore[arg-type]
    assert event.name == name
    assert event.fmt == fmt
    assert event.known
    assert event.authority == "w1"
    assert event.circuits == circuits
    assert event.circuit is None and event.routes is None
    assert event.circuit_ids == [CID, "00000000-0000-4000-8000-000000000001"]
    assert event.source == "appproxy-coordinator"
    assert event.metadata is not None and event.metadata["request_id"] is None


@pytest.mark.parametrize("fmt", ["args", "payload"])
def test_route_updated_round_trip(fmt: str) -> None:
    circuit = circuit_dict()
    routes = [ROUTE, dict(ROUTE, kernel_port=8001, route_id=None)]
    event = decode(
        encode_event(ROUTE_UPDATED, fmt, authority="w1", circuit=circuit, routes=routes)  # type: ignore[arg-type]
    )
    assert event.name == ROUTE_UPDATED
    assert event.authority == "w1"
    assert event.circuit == circuit
    assert event.routes == routes
    assert event.circuits == []
    assert event.circuit_ids == [CID]


def test_args_route_updated_packs_three_strings() -> None:
    msg = orjson.loads(encode_event(ROUTE_UPDATED, "args", authority="w", circuit={"id": CID}, routes=[]))
    args = msgpack.unpackb(base64.b64decode(msg["args"]), raw=False)
    assert args == ["w", f'{{"id":"{CID}"}}', "[]"]


@pytest.mark.parametrize("fmt", ["args", "payload"])
def test_ack_of_a_decoded_event_echoes_it_exactly(fmt: str) -> None:
    """decode → encode_ack keeps every circuit field, unknown ones included."""
    circuit = circuit_dict(unknown_future_field=[1, {"a": None}])
    created = decode(encode_event(CREATED, fmt, authority="w", circuits=[circuit]))  # type: ignore[arg-type]
    ack = decode(encode_ack("w", created.circuits, created.fmt))
    assert ack.name == ACK
    assert ack.fmt == fmt
    assert ack.circuits == [circuit]


def test_decode_accepts_str_and_a_message_without_metadata() -> None:
    raw = orjson.dumps(
        {
            "name": CREATED,
            "source": "x",
            "payload": orjson.dumps({"target_worker_authority": "w", "circuits": []}).decode(),
        }
    ).decode()
    event = decode(raw)
    assert event.fmt == "payload"
    assert event.metadata is None and event.metadata_raw is None
    assert event.circuits == []


def test_decode_tolerates_unparseable_metadata() -> None:
    """Metadata is optional on receive and never needed by the worker."""
    raw = orjson.loads(encode_ack("w", [], "args"))
    raw["metadata"] = "{not json"
    event = decode(orjson.dumps(raw))
    assert event.metadata is None
    assert event.metadata_raw == "{not json"


@pytest.mark.parametrize("fmt", ["args", "payload"])
def test_unknown_names_decode_so_the_caller_can_ignore_them(fmt: str) -> None:
    if fmt == "args":
        body = {"args": base64.b64encode(msgpack.packb(["w9", 3, b"\x00"])).decode()}
    else:
        body = {"payload": orjson.dumps({"target_worker_authority": "w9", "k": 1}).decode()}
    event = decode(orjson.dumps({"name": "appproxy_router_key_updated_event", **body}))
    assert not event.known
    assert event.name == "appproxy_router_key_updated_event"
    assert event.authority == "w9"
    assert event.circuits == []


def _args_msg(name: str, args: object) -> bytes:
    packed = base64.b64encode(msgpack.packb(args, use_bin_type=True)).decode()
    return orjson.dumps({"name": name, "source": "s", "args": packed})


def _payload_msg(name: str, payload: object) -> bytes:
    return orjson.dumps({"name": name, "payload": orjson.dumps(payload).decode()})


MALFORMED = {
    "not json": b"{nope",
    "json array": b"[1,2]",
    "no name": orjson.dumps({"args": ""}),
    "empty name": orjson.dumps({"name": "", "args": ""}),
    "neither args nor payload": orjson.dumps({"name": CREATED}),
    "args not base64": orjson.dumps({"name": CREATED, "args": "***"}),
    "args not a string": orjson.dumps({"name": CREATED, "args": 5}),
    "args not msgpack": orjson.dumps({"name": CREATED, "args": base64.b64encode(b"\xc1").decode()}),
    "args not an array": _args_msg(CREATED, {"a": 1}),
    "created missing circuits": _args_msg(CREATED, ["w"]),
    "created authority not str": _args_msg(CREATED, [1, "[]"]),
    "created circuits not str": _args_msg(CREATED, ["w", 5]),
    "created circuits not json": _args_msg(CREATED, ["w", "[{"]),
    "created circuits not array": _args_msg(CREATED, ["w", "{}"]),
    "created circuit not object": _args_msg(CREATED, ["w", "[1]"]),
    "route_updated missing routes": _args_msg(ROUTE_UPDATED, ["w", "{}"]),
    "route_updated circuit not object": _args_msg(ROUTE_UPDATED, ["w", "[]", "[]"]),
    "payload not json": orjson.dumps({"name": CREATED, "payload": "{x"}),
    "payload not object": _payload_msg(CREATED, [1]),
    "payload missing authority": _payload_msg(CREATED, {"circuits": []}),
    "payload circuits missing": _payload_msg(CREATED, {"target_worker_authority": "w"}),
    "payload route missing circuit": _payload_msg(ROUTE_UPDATED, {"target_worker_authority": "w", "routes": []}),
    "payload routes not objects": _payload_msg(
        ROUTE_UPDATED, {"target_worker_authority": "w", "circuit": {}, "routes": [1]}
    ),
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_messages_raise_envelope_error(raw: bytes) -> None:
    with pytest.raises(EnvelopeError):
        decode(raw)


def test_envelope_error_is_a_value_error() -> None:
    assert issubclass(EnvelopeError, ValueError)


def test_encode_event_rejects_misuse() -> None:
    with pytest.raises(ValueError):
        encode_event(CREATED, "json", authority="w", circuits=[])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_event("something_else", "args", authority="w", circuits=[])
    with pytest.raises(ValueError):
        encode_event(CREATED, "args", authority="w", circuit={}, routes=[])
    with pytest.raises(ValueError):
        encode_event(ROUTE_UPDATED, "args", authority="w", circuits=[])


def test_channel_name_matches_the_reference() -> None:
    assert envelope.CHANNEL == "events_all-appproxy"
