"""Fake prefill and decode replicas that enforce the disaggregation protocols.

Each wraps the fake OpenAI-compatible backend (fakes/openai_backend.py: the
same answers, `Behavior` faults and recorded requests) and checks the part of
its protocol a router is responsible for. The replicas of one test share a
`Ledger`, the stand-in for the KV transfer between them (NIXL, Mooncake):

vLLM (`kv_transfer_params`, vLLM's NixlConnector and its disaggregated proxy):
- a prefill replica answers only a request asking for a remote decode
  (`kv_transfer_params.do_remote_decode: true`), non-streaming, with
  `max_tokens` 1 (and `max_completion_tokens` 1 when given); its JSON answer
  carries `kv_transfer_params` (`do_remote_prefill: true`, `remote_engine_id`,
  `remote_block_ids`, `remote_request_id`, `remote_host`, `remote_port`,
  `tp_size`) that the ledger records as issued;
- a decode replica answers only a request whose `kv_transfer_params` a
  prefill replica issued and no decode used yet (vLLM frees the blocks once
  read): anything else is a 400.

SGLang (bootstrap rooms, SGLang's PD gateway):
- both replicas need `bootstrap_host`, `bootstrap_port` and `bootstrap_room`
  (an integer in [0, 2^63-1]); a prefill replica refuses a host or port that
  is not its own, and opens the room once its own answer is complete;
- a decode replica waits up to `room_wait_s` for a prefill replica to open
  its room (with the same host and port) and answers 500 when none did, as a
  decode whose KV transfer never arrived fails.

A prefill or decode replica refuses a request without its protocol's fields:
a unified request must go to a `both` replica (a plain fake).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from . import openai_backend
from .server import FAKE_KEY, Behavior, Recorded, ServerThread

__all__ = ["Ledger", "make_app", "server_thread"]

ROOM_MAX = (1 << 63) - 1
_KEEP = 10_000  # issued parameters / rooms a ledger remembers (oldest dropped)


class Ledger:
    """What the prefill replicas of one test handed over; thread-safe (each
    fake serves from its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._issued: OrderedDict[tuple[str, tuple[int, ...]], bool] = OrderedDict()
        self._rooms: OrderedDict[int, tuple[str, Any]] = OrderedDict()
        self._blocks = itertools.count(1)
        self.consumed = 0  # vLLM parameters a decode replica used
        self.joined = 0  # SGLang rooms a decode replica joined

    def issue(self, engine_id: str, n: int) -> list[int]:
        with self._lock:
            blocks = [next(self._blocks) for _ in range(n)]
            self._issued[(engine_id, tuple(blocks))] = False
            while len(self._issued) > _KEEP:
                self._issued.popitem(last=False)
            return blocks

    def consume(self, engine_id: Any, blocks: Any) -> bool:
        if not isinstance(engine_id, str) or not isinstance(blocks, list):
            return False
        key = (engine_id, tuple(blocks))
        with self._lock:
            if self._issued.get(key) is not False:
                return False
            self._issued[key] = True
            self.consumed += 1
            return True

    def open_room(self, room: int, host: str, port: Any) -> None:
        with self._lock:
            self._rooms[room] = (host, port)
            while len(self._rooms) > _KEEP:
                self._rooms.popitem(last=False)

    def take_room(self, room: int) -> tuple[str, Any] | None:
        with self._lock:
            found = self._rooms.pop(room, None)
            if found is not None:
                self.joined += 1
            return found


def _refuse(message: str, status: int = 400) -> web.Response:
    return openai_backend.error_response(status, message)


Check = Callable[[Any], Awaitable[web.Response | None]]


def _vllm_check(role: str, ledger: Ledger) -> Check:
    async def check(body: Any) -> web.Response | None:
        params = body.get("kv_transfer_params") if isinstance(body, dict) else None
        if not isinstance(params, dict):
            return _refuse(f"this is a vLLM {role} replica: a request needs kv_transfer_params")
        if role == "decode":
            if params.get("do_remote_prefill") is not True or not ledger.consume(
                params.get("remote_engine_id"), params.get("remote_block_ids")
            ):
                return _refuse("kv_transfer_params were not issued by a prefill replica, or were used already")
            return None
        if params.get("do_remote_decode") is not True or params.get("do_remote_prefill") is not False:
            return _refuse("a prefill request asks for do_remote_decode: true, do_remote_prefill: false")
        if body.get("stream") is not False or body.get("max_tokens") != 1:
            return _refuse("a prefill request is stream: false with max_tokens: 1")
        if "max_completion_tokens" in body and body["max_completion_tokens"] != 1:
            return _refuse("a prefill request has max_completion_tokens: 1")
        if "stream_options" in body:
            return _refuse("a prefill request has no stream_options (it does not stream)")
        return None

    return check


def _vllm_issue(ledger: Ledger, engine_id: str, host: str):
    """A prefill replica's answer names the KV blocks it keeps for the decode."""

    @web.middleware
    async def issue(request: web.Request, handler: Any) -> web.StreamResponse:
        response = await handler(request)
        if request.method != "POST" or response.status != 200 or not isinstance(response, web.Response):
            return response
        answer = orjson.loads(response.body)  # type: ignore[arg-type]
        answer["kv_transfer_params"] = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": ledger.issue(engine_id, 2),
            "remote_engine_id": engine_id,
            "remote_request_id": request.headers.get("x-request-id") or uuid.uuid4().hex,
            "remote_host": host,
            "remote_port": 5600,
            "tp_size": 1,
        }
        return web.Response(status=200, body=orjson.dumps(answer), content_type="application/json")

    return issue


def _sglang_legs(body: Any) -> list[tuple[Any, Any, Any]] | web.Response:
    if not isinstance(body, dict) or not all(k in body for k in ("bootstrap_host", "bootstrap_port",
                                                                  "bootstrap_room")):
        return _refuse("an SGLang prefill or decode replica needs bootstrap_host, bootstrap_port and bootstrap_room")
    rooms, hosts, ports = body["bootstrap_room"], body["bootstrap_host"], body["bootstrap_port"]
    if isinstance(rooms, list):  # a batch: one room per sequence, lists of the same length
        if not (isinstance(hosts, list) and isinstance(ports, list) and len(hosts) == len(ports) == len(rooms)):
            return _refuse("a batch's bootstrap_host, bootstrap_port and bootstrap_room are lists of one length")
        legs = list(zip(rooms, hosts, ports, strict=True))
    else:
        legs = [(rooms, hosts, ports)]
    for room, _, _ in legs:
        if isinstance(room, bool) or not isinstance(room, int) or not 0 <= room <= ROOM_MAX:
            return _refuse("bootstrap_room must be an integer in [0, 2^63-1]")
    return legs


def _sglang_check(role: str, ledger: Ledger, host: str, bootstrap_port: int | None, room_wait_s: float) -> Check:
    async def check(body: Any) -> web.Response | None:
        legs = _sglang_legs(body)
        if isinstance(legs, web.Response):
            return legs
        if role == "prefill":
            if any(h != host or p != bootstrap_port for _, h, p in legs):
                return _refuse("bootstrap_host and bootstrap_port must name this prefill replica")
            return None
        deadline = time.monotonic() + room_wait_s
        for room, h, p in legs:
            while (found := ledger.take_room(room)) is None:
                if time.monotonic() >= deadline:
                    return _refuse(
                        f"KV transfer failed: no prefill joined bootstrap room {room} in {room_wait_s:g}s", 500
                    )
                await asyncio.sleep(0.005)
            if found != (h, p):
                return _refuse("the bootstrap room was opened by another prefill replica", 500)
        return None

    return check


def _sglang_open(ledger: Ledger):
    """A prefill replica's rooms open once its answer is complete."""

    @web.middleware
    async def open_rooms(request: web.Request, handler: Any) -> web.StreamResponse:
        response = await handler(request)
        if request.method == "POST" and response.status == 200:
            legs = _sglang_legs(orjson.loads(await request.read()))
            if not isinstance(legs, web.Response):
                for room, h, p in legs:
                    ledger.open_room(room, h, p)
        return response

    return open_rooms


def make_app(
    name: str, models: list[str], behavior: Behavior | None = None, requests: list[Recorded] | None = None, *,
    protocol: str, role: str, ledger: Ledger, host: str = "127.0.0.1", bootstrap_port: int | None = None,
    room_wait_s: float = 30.0,
) -> web.Application:
    app = openai_backend.make_app(name, models, behavior, requests)
    if protocol == "vllm":
        check = _vllm_check(role, ledger)
        if role == "prefill":
            app.middlewares.append(_vllm_issue(ledger, f"{name}-{uuid.uuid4().hex[:8]}", host))
    elif protocol == "sglang":
        check = _sglang_check(role, ledger, host, bootstrap_port, room_wait_s)
        if role == "prefill":
            app.middlewares.append(_sglang_open(ledger))
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    # The protocol is checked after the request is recorded and the
    # `Behavior` faults applied, as the fake's own checks are.
    faults = app[FAKE_KEY].faults
    recorded_begin = faults.begin

    async def begin(request: web.Request) -> tuple[bytes, Any, web.Response | None]:
        body, data, err = await recorded_begin(request)
        if err is None:
            err = await check(data)
        return body, data, err

    faults.begin = begin
    return app


def server_thread(
    name: str, models: list[str] | tuple[str, ...] = ("demo",), *, protocol: str, role: str, ledger: Ledger,
    port: int = 0, host: str = "127.0.0.1", behavior: Behavior | None = None, bootstrap_port: int | None = None,
    room_wait_s: float = 30.0,
) -> ServerThread:
    """A (not yet started) `ServerThread` serving one replica of `role`
    ("prefill" | "decode") speaking `protocol` ("vllm" | "sglang")."""
    model_list = list(models)
    return ServerThread(
        lambda b, reqs: make_app(name, model_list, b, reqs, protocol=protocol, role=role, ledger=ledger,
                                 host=host, bootstrap_port=bootstrap_port, room_wait_s=room_wait_s),
        host=host, port=port, behavior=behavior,
    )
