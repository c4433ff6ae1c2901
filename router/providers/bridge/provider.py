"""`bridged(inner)`: a chat-only provider that also serves `/v1/responses`.

A Responses request is converted to a Chat Completions request (the pure
`request` module) *after* selection and *before* dispatch — a field that
cannot be honoured is a 400 and nothing is sent — and handed to `inner` as a
chat Envelope. Its answer comes back as a Response object (`answer`) or, for
a stream, as Responses events translated chunk by chunk (`stream`), never
buffered whole. An error answer (status >= 400) is relayed as it is: OpenAI
error objects are the same on both surfaces. Every other endpoint goes
straight to `inner`; kinds, path, probe and model listing are inner's.

The exchange keeps the chat Exchange, the chat Envelope and the stream
translator in `info["responses_bridge"]`; the inner relay is owned by an
`aclosing` block, so a client that leaves closes the upstream at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable

import orjson

from ...core.backend import BackendSpec
from ...core.errors import RouterError, UpstreamError
from ...request import Envelope
from ..base import Exchange, Provider, Wrapper
from ..normalized import new_id
from .answer import chat_to_response
from .request import responses_to_chat
from .stream import ResponsesFromChat

_KEY = "responses_bridge"
ADAPTER = "responses-bridge"


@dataclasses.dataclass(slots=True)
class _Bridge:
    """What `finish` / `relay` need of the chat exchange behind a Responses one."""

    inner: Exchange
    env: Envelope  # the chat Envelope sent to the inner provider
    created_at: int
    translator: ResponsesFromChat | None = None  # streams only


class BridgedProvider(Wrapper):
    """`inner` for every endpoint, plus `/v1/responses` through its chat completions."""

    def __init__(self, inner: Provider) -> None:
        super().__init__(inner)
        self.runs_command: bool = getattr(inner, "runs_command", False)  # router.providers.COMMAND_KINDS

    def __repr__(self) -> str:
        return f"bridged({self.inner!r})"

    async def start(self, rt, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        if env.endpoint != "responses":
            return await self.inner.start(rt, spec, env, model)
        conversion = responses_to_chat(env.body)  # raises before dispatch
        chat = conversion.request
        chat_env = dataclasses.replace(
            env,
            endpoint="chat/completions",
            body=chat,
            raw=orjson.dumps(chat),
            notes=dict(env.notes),
            relay_whole=False,
        )
        inner = await self.inner.start(rt, spec, chat_env, model)
        bridge = _Bridge(inner, chat_env, int(time.time()))
        adapter = inner.info.get("adapter")
        info = {
            **inner.info,
            _KEY: bridge,
            "adapter": f"{adapter}+{ADAPTER}" if adapter else ADAPTER,
            "ignored_fields": [*conversion.ignored_fields, *inner.info.get("ignored_fields", ())],
            "notes": [*conversion.notes, *inner.info.get("notes", ())],
        }
        out = Exchange(
            spec,
            inner.status,
            inner.headers,
            inner.content_type,
            inner.body,
            stream=inner.stream,
            close=inner.close,
            upstream_ms=inner.upstream_ms,
            info=info,
            wire=inner.wire,
        )
        if inner.status < 400 and inner.stream is not None:
            bridge.translator = ResponsesFromChat(
                model=env.model, response_id=new_id("resp"), created_at=bridge.created_at, request_body=env.body
            )
            out.content_type = "text/event-stream"
            out.body = b"".join(bridge.translator.start())
        return out

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        bridge = ex.info.get(_KEY)
        if not isinstance(bridge, _Bridge):
            return self.inner.finish(ex, env)
        body, info = self.inner.finish(bridge.inner, bridge.env)
        if bridge.inner.status >= 400:
            return body, info  # an OpenAI error object: the same on both surfaces
        try:
            completion = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError("The provider's chat answer is not JSON.") from exc
        response = chat_to_response(
            completion,
            model=env.model,
            response_id=new_id("resp"),
            created_at=bridge.created_at,
            request_body=env.body,
        )
        return orjson.dumps(response), {**info, "usage": response["usage"]}

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        bridge = ex.info.get(_KEY)
        if not isinstance(bridge, _Bridge) or bridge.translator is None:
            return self.inner.relay(ex, env, done)
        return _relay(self.inner, ex, bridge, bridge.translator, done)


async def _relay(
    inner: Provider,
    ex: Exchange,
    bridge: _Bridge,
    translator: ResponsesFromChat,
    done: Callable[[bool | None, dict], None],
) -> AsyncIterator[bytes]:
    """The inner chat relay's bytes as Responses events, one yield per chunk.
    `done` is called once, here; the inner relay's verdict only informs it."""
    verdicts: list[bool | None] = []
    ok: bool | None = None  # stays None when the client goes away
    head = ex.body  # response.created + response.in_progress
    try:
        chunks = inner.relay(bridge.inner, bridge.env, lambda verdict, info: verdicts.append(verdict))
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                data = head + b"".join(translator.feed(chunk))
                head = b""
                if data:
                    yield data
        data = head + b"".join(translator.finish())
        if data:
            yield data
        ok = verdicts[:1] != [False] and not translator.failed
    except (RouterError, ValueError) as exc:
        ok = False
        error = exc if isinstance(exc, RouterError) else UpstreamError(f"The provider's stream is unusable: {exc}")
        yield head + b"".join(translator.fail(error))
    finally:
        done(ok, {"usage": translator.usage})


def bridged(inner: Provider) -> Provider:
    """`inner` (a chat-only provider) that also serves `POST /v1/responses`."""
    return BridgedProvider(inner)
