"""Micro benchmark: what timing the gaps between streamed chunks costs.

RoutedStream (router/frontends/responses.py) reads the clock once per chunk
it hands to the client and counts the gap into an observation's `Gaps`
(router/observe.py). This measures that call alone, and a whole response
iterated the way the ASGI handler does: Django's own `__aiter__` (two
generator layers) against the timed one that replaces it.

    .venv/bin/python bench/inter_token_hook.py

Best of several runs, ns per chunk; the figures are in docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import os
import sys
import timeit
from pathlib import Path
from time import perf_counter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.http import StreamingHttpResponse  # noqa: E402

from router.observe import Gaps  # noqa: E402

N = 100_000


async def _source(n: int):
    for _ in range(n):
        yield b"x"


class _Timed(StreamingHttpResponse):
    """RoutedStream's __aiter__, without the Routed it closes."""

    async def __aiter__(self):
        tick = Gaps().tick
        async for part in self._iterator:
            tick(perf_counter())
            yield part


async def _consume(response: StreamingHttpResponse) -> None:
    async for _ in response:
        pass


def _per_chunk_ns(cls: type[StreamingHttpResponse]) -> float:
    response = cls(_source(N))
    started = perf_counter()
    asyncio.run(_consume(response))
    return (perf_counter() - started) / N * 1e9


def main() -> None:
    tick = Gaps().tick
    names = {"tick": tick, "perf_counter": perf_counter}
    call = min(timeit.repeat("tick(perf_counter())", globals=names, number=N, repeat=7)) / N * 1e9
    clock = min(timeit.repeat("perf_counter()", globals=names, number=N, repeat=7)) / N * 1e9
    django_ns = min(_per_chunk_ns(StreamingHttpResponse) for _ in range(5))
    timed_ns = min(_per_chunk_ns(_Timed) for _ in range(5))
    print(f"Gaps.tick(perf_counter()): {call:.0f} ns/chunk (perf_counter() alone {clock:.0f} ns)")
    print(f"iterating a response: Django's __aiter__ {django_ns:.0f} ns/chunk, the timed one {timed_ns:.0f} ns/chunk")


if __name__ == "__main__":
    main()
