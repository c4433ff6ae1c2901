"""`Routed` owns the backend slot and the upstream until it is closed, in every case.

The front doors hand a `Routed` to Django inside a `RoutedStream`; Django
calls the response's `close()` when it is done with it — also when the client
left before the first byte was sent, so the stream was never iterated.
"""

from __future__ import annotations

import asyncio
import time

from router.core.backend import BackendSpec
from router.frontends.responses import RoutedStream
from router.pipeline import Routed
from router.providers import provider_for
from router.providers.base import Exchange
from router.request import Envelope
from router.runtime import Runtime


class Upstream:
    """The rest of an upstream SSE body, and whether it was closed."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = 0

    async def rest(self):
        for chunk in self.chunks:
            yield chunk

    async def close(self) -> None:
        self.closed += 1


def routed_stream(rt: Runtime, upstream: Upstream) -> tuple[Routed, object]:
    spec = BackendSpec(name="b1", url="http://127.0.0.1:9", models=("m",))
    state = rt.states.get(spec.name)
    state.on_start()
    env = Envelope(endpoint="chat/completions", raw=b"{}", body={"model": "m"}, model="m", stream=True,
                   headers={}, client_ip="127.0.0.1", host="", request_id="r1")
    ex = Exchange(spec, 200, [], "text/event-stream", b"data: {}\n\n", stream=upstream.rest(),
                  close=upstream.close, info={"served": "m", "rewrite": False})
    obs: dict = {}
    return Routed(rt, provider_for(spec.kind), ex, env, obs, time.perf_counter(), state), state


async def until(condition, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_stream_never_iterated_frees_its_slot_and_closes_the_upstream():
    rt = Runtime()
    upstream = Upstream([b"data: {}\n\n"])
    routed, state = routed_stream(rt, upstream)
    response = RoutedStream(routed.events(), routed, status=200, content_type="text/event-stream")
    assert state.in_flight == 1
    response.close()  # what Django does when the client left before the first byte
    await until(lambda: state.in_flight == 0 and upstream.closed == 1)
    assert routed.obs.get("client_disconnected") is True


async def test_a_stream_left_mid_way_runs_the_relay_finally_at_once():
    rt = Runtime()
    upstream = Upstream([b"data: {}\n\n", b"data: {}\n\n"])
    routed, state = routed_stream(rt, upstream)
    events = routed.events()
    assert await anext(events)  # the first chunk went out; the consumer stops here
    response = RoutedStream(events, routed, status=200, content_type="text/event-stream")
    response.close()
    await until(lambda: state.in_flight == 0 and upstream.closed == 1)
    assert routed.obs.get("client_disconnected") is True


async def test_a_finished_stream_is_released_once():
    rt = Runtime()
    upstream = Upstream([b"data: [DONE]\n\n"])
    routed, state = routed_stream(rt, upstream)
    async with routed:
        chunks = [chunk async for chunk in routed.events()]
    assert chunks[-1] == b"data: [DONE]\n\n"
    other = rt.states.get("b1")
    other.on_start()  # another request now holds a slot of the same backend
    RoutedStream(routed.events(), routed, status=200, content_type="text/event-stream").close()
    await routed.aclose()
    await asyncio.sleep(0.05)
    assert state.in_flight == 1 and upstream.closed == 1  # the other request's slot is untouched
    assert "client_disconnected" not in routed.obs
