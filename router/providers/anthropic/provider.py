"""The Anthropic provider, normalized path: OpenAI Chat Completions ↔ the Messages API.

The request is converted (the pure modules of this package) *after* the
provider was selected and *before* anything is dispatched: a field that
cannot be honoured is a 400 `unsupported_parameter`, and nothing goes
upstream. Anthropic's messages and SSE events become exact OpenAI shapes;
its errors become OpenAI error objects with their status kept (529 → 503).

The Anthropic door's own requests (`env.notes["anthropic_request"]`) are sent
as the client wrote them and answered untranslated (`door.py`), and so is
`messages/count_tokens`.
Authenticates with `x-api-key` and `anthropic-version`, never a Bearer token.
Probed at `GET /v1/models`, which is also its model listing.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from ...core.backend import BackendSpec
from ...core.errors import RouterError, UnsupportedParameter, UpstreamBadResponse
from ...request import Envelope
from .. import anthropic  # this package's pure conversions (its __init__)
from ..base import WIRE_ANTHROPIC, Exchange, UpstreamFailed
from ..http import relay_headers, send
from ..relay import EARLY_FAILURES, converted, empty, failed_early, relay
from . import door
from .upstream import api_base, auth_headers, request_headers


class AnthropicProvider:
    """Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`, `/v1/models`)."""

    kinds = frozenset({"anthropic"})
    path = "normalized"

    def probe_url(self, spec: BackendSpec, path: str) -> str | None:
        """`/v1/models` under the base; health.path is for OpenAI-compatible servers."""
        del path
        return api_base(spec) + "/v1/models"

    def probe_headers(self, spec: BackendSpec) -> dict[str, str]:
        return auth_headers(spec)

    def load_url(self, spec: BackendSpec, path: str) -> str | None:
        return None  # publishes no load the router reads

    def listed_models(self, data: dict[str, Any]) -> list[str] | None:
        return anthropic.listed_models(data)

    async def start(self, rt, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        served = spec.served_name(model)
        own = env.notes.get("anthropic_request")
        own = own if isinstance(own, dict) else None
        if env.endpoint == "messages/count_tokens":
            return await door.count(rt, spec, env, served, own)
        if env.endpoint != "chat/completions":
            raise UnsupportedParameter(
                f"/v1/{env.endpoint} is not available from the selected provider (Anthropic); "
                "use /v1/chat/completions or /v1/messages.",
            )
        if own is not None:
            return await door.as_is(rt, spec, env, served, own)
        conversion = anthropic.chat_request(env.body, served)  # raises before dispatch
        sent = await send(
            rt.transport,
            spec,
            api_base(spec) + "/v1/messages",
            content=orjson.dumps(conversion.request),
            headers=request_headers(spec),
            stream=env.stream,
            max_bytes=env.max_response_bytes,
        )
        response, first, ms = sent.response, sent.first, sent.ms
        info: dict[str, Any] = {
            "served": served,
            "adapter": "anthropic",
            "ignored_fields": conversion.ignored_fields,
            "notes": conversion.notes,
        }
        if response.status_code >= 400:
            status, error = anthropic.error_from_anthropic(response.status_code, first)
            return Exchange(
                spec, status, relay_headers(response), "application/json", orjson.dumps(error),
                upstream_ms=ms, info=info,
            )
        now = int(time.time())
        if not env.stream:
            try:
                out = anthropic.chat_completion(
                    orjson.loads(first), model=env.model, completion_id=anthropic.new_id("chatcmpl-"), created=now
                )
            except (orjson.JSONDecodeError, RouterError) as exc:
                raise UpstreamFailed(
                    f"{spec.name} answered something unusable: {exc}", error=UpstreamBadResponse
                ) from exc
            info["usage"] = out["usage"]
            return Exchange(spec, 200, [], "application/json", orjson.dumps(out), upstream_ms=ms, info=info)
        # Streaming: translate the events; read until the first frame exists so
        # a provider that dies before its first token is still retried.
        options = env.body.get("stream_options")
        translator = anthropic.ChatStream(
            model=env.model,
            completion_id=anthropic.new_id("chatcmpl-"),
            created=now,
            include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        )
        decoder = anthropic.SseDecoder()
        iterator = sent.rest
        assert iterator is not None  # a 2xx stream keeps its rest open
        frames: list[bytes] = []
        pending: deque[dict] = deque()  # events after the first frame's, for the relay
        chunk = first
        try:
            while True:
                pending.extend(decoder.feed(chunk))
                while pending and not frames:
                    frames.extend(translator.feed(pending.popleft()))
                if frames:
                    break
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    for event in decoder.close():
                        frames.extend(translator.feed(event))
                    frames.extend(translator.finish())
                    sent.rest = None
                    break
        except EARLY_FAILURES as exc:
            await response.aclose()
            raise failed_early(spec.name, exc) from exc
        info["translator"] = translator
        return Exchange(
            spec,
            200,
            [],
            "text/event-stream",
            b"".join(frames),
            stream=converted(iterator, decoder, translator, pending) if sent.rest is not None else empty(),
            close=response.aclose,
            upstream_ms=ms,
            info=info,
        )

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        """The whole body (`start` already built or kept it)."""
        return ex.body, {"usage": ex.info.get("usage")}

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        if ex.wire == WIRE_ANTHROPIC:
            return door.relay_as_is(ex, done)
        return relay(ex, done)


ANTHROPIC = AnthropicProvider()
