"""The streaming relay the translating providers share (Ollama, Gemini, Anthropic).

`start` reads the upstream until the first client frame exists; the rest
is `converted` chunk by chunk, and `relay` sends both to the client,
turning a mid-stream failure into the translator's own error frames and
reporting `done(ok, {"usage": ...})` once the upstream is closed.

A translator has `feed(event) -> list[bytes]`, `finish() -> list[bytes]`,
`fail(error) -> list[bytes]` and `usage`; a decoder has `feed(chunk)` and
`close()`, each giving the decoded events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx

from ..core.errors import RouterError, UpstreamBadResponse, UpstreamError, UpstreamTimeout
from .base import Exchange, UpstreamFailed
from .framing import FramingError
from .http import is_timeout

# What reading a stream may fail with before its first client frame: the
# attempt then failed before the client saw a byte (`failed_early`).
EARLY_FAILURES = (RouterError, ValueError, httpx.HTTPError)


# A stream that is not what it promised: its framing (a line over the cap,
# an event that is not JSON), its HTTP framing, or the router says so.
BAD_ANSWERS = (FramingError, httpx.RemoteProtocolError, UpstreamBadResponse)


def failed_early(name: str, exc: BaseException) -> UpstreamFailed:
    """A failure before the first frame of backend `name` → retried elsewhere."""
    timeout = isinstance(exc, httpx.HTTPError) and is_timeout(exc)
    error = UpstreamBadResponse if isinstance(exc, BAD_ANSWERS) else None
    return UpstreamFailed(f"{name} failed before its first token: {exc}", timeout=timeout, error=error)


def mid_stream_error(exc: BaseException) -> RouterError:
    """A failure after the first frame → the router error the client is told."""
    if isinstance(exc, RouterError):
        return exc
    if isinstance(exc, httpx.HTTPError) and is_timeout(exc):
        return UpstreamTimeout("The provider timed out mid-stream.")
    if isinstance(exc, BAD_ANSWERS):
        return UpstreamBadResponse(f"The provider's stream is unusable: {exc}")
    return UpstreamError(f"The provider failed mid-stream ({type(exc).__name__}).")


async def first_frames(
    first: bytes, iterator: AsyncIterator[bytes], decoder: Any, translator: Any
) -> tuple[list[bytes], bool]:
    """Feed `first`, then further chunks, until a client frame exists.

    Returns (frames, ended): `ended` when the upstream finished first (the
    frames then include the translator's finish). Every event decoded from a
    chunk is translated, also past the first frame.
    """
    frames: list[bytes] = []
    chunk = first
    while True:
        for obj in decoder.feed(chunk):
            frames.extend(translator.feed(obj))
        if frames:
            return frames, False
        try:
            chunk = await anext(iterator)
        except StopAsyncIteration:
            for obj in decoder.close():
                frames.extend(translator.feed(obj))
            frames.extend(translator.finish())
            return frames, True


async def empty() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover


async def converted(
    iterator: AsyncIterator[bytes], decoder: Any, translator: Any, pending: Iterable[Any] = ()
) -> AsyncIterator[bytes]:
    """The rest of the upstream stream as client bytes, one yield per upstream
    chunk (the first for the `pending` events `start` decoded past its first frame)."""
    events = list(pending)
    if events:
        yield b"".join(frame for event in events for frame in translator.feed(event))
    async for chunk in iterator:
        out = [frame for event in decoder.feed(chunk) for frame in translator.feed(event)]
        if out:
            yield b"".join(out)
    tail = [frame for event in decoder.close() for frame in translator.feed(event)]
    yield b"".join(tail + translator.finish())


async def relay(
    ex: Exchange,
    done: Callable[[bool | None, dict], None],
    passed: tuple[type[Exception], ...] = (),
) -> AsyncIterator[bytes]:
    """`ex.body` then `ex.stream`; a failure becomes `translator.fail(error)`.
    Exceptions of the `passed` types reach the translator as they are."""
    translator = ex.info["translator"]
    caught: tuple[type[Exception], ...] = (RouterError, *passed, ValueError, httpx.HTTPError)
    ok: bool | None = None
    try:
        if ex.body:
            yield ex.body
        async for data in ex.stream:  # type: ignore[union-attr]
            if data:
                yield data
        ok = True
    except caught as exc:
        ok = False
        error: Exception = exc if isinstance(exc, passed) else mid_stream_error(exc)
        yield b"".join(translator.fail(error))
    finally:
        if ex.close is not None:
            await ex.close()
        done(ok, {"usage": translator.usage})
