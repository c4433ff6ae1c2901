"""The Gemini provider, normalized path: it speaks the Generative Language API.

The request is converted (the pure modules of this package) *after* the
provider was selected and *before* anything is dispatched: a field that
cannot be converted is a 400 `unsupported_parameter`, and nothing goes
upstream. Gemini's JSON / SSE answers are converted back into the exact
OpenAI shapes. The API key rides in `x-goog-api-key` (never in the URL,
never as a Bearer token). Probed at `GET <base>/models`, its model listing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from ...core.backend import BackendSpec
from ...core.errors import RouterError, UnsupportedParameter, UpstreamBadResponse
from ...request import Envelope
from .. import gemini  # this package's pure conversions (its __init__)
from ..base import WIRE_ANTHROPIC, Exchange, UpstreamFailed
from ..http import send
from ..normalized import prefixed_id
from ..relay import EARLY_FAILURES, converted, empty, failed_early, first_frames, relay

_ENDPOINTS = ("chat/completions", "embeddings", "messages/count_tokens")


def gemini_headers(spec: BackendSpec, *, json: bool = True) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept-encoding": "identity"} if json else {}
    if spec.api_key:
        headers["x-goog-api-key"] = spec.api_key.reveal()
    for name, value in spec.headers:
        headers[name.lower()] = value
    return headers


class GeminiProvider:
    """Google's Gemini API (`generateContent`, `embedContent`, `countTokens`, `models`)."""

    kinds = frozenset({"gemini"})
    path = "normalized"

    def probe_url(self, spec: BackendSpec, path: str) -> str | None:
        """`<base>/models` (one page of up to 1000); health.path is for
        OpenAI-compatible servers and does not apply."""
        del path
        return gemini.api_base(spec.url) + "/models?pageSize=1000"

    def probe_headers(self, spec: BackendSpec) -> dict[str, str]:
        return gemini_headers(spec, json=False)

    def load_url(self, spec: BackendSpec, path: str) -> str | None:
        return None  # publishes no load the router reads

    def listed_models(self, data: dict[str, Any]) -> list[str] | None:
        return gemini.listed_models(data)

    async def start(self, rt, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        if env.endpoint not in _ENDPOINTS:
            raise UnsupportedParameter(
                f"/v1/{env.endpoint} is not available from the selected provider (Gemini); "
                "use /v1/chat/completions or /v1/embeddings.",
            )
        served = spec.served_name(model)
        target = gemini.api_base(spec.url) + "/" + gemini.model_path(served)
        stream = False
        if env.endpoint == "chat/completions":
            conversion = gemini.chat_request(env.body, served)  # raises before dispatch
            stream = env.stream
            url = target + (":streamGenerateContent?alt=sse" if stream else ":generateContent")
        elif env.endpoint == "embeddings":
            method, conversion = gemini.embed_request(env.body, served)
            url = f"{target}:{method}"
        else:
            conversion = gemini.count_request(env.body, served)
            url = target + ":countTokens"
        sent = await send(
            rt.transport,
            spec,
            url,
            content=orjson.dumps(conversion.request),
            headers=gemini_headers(spec),
            stream=stream,
            max_bytes=env.max_response_bytes,
        )
        response, first, ms = sent.response, sent.first, sent.ms
        info: dict[str, Any] = {
            "served": served,
            "adapter": "gemini",
            "ignored_fields": conversion.ignored_fields,
            "notes": conversion.notes,
        }
        if response.status_code >= 400:
            status, error = gemini.error_from_gemini(response.status_code, first)
            return Exchange(spec, status, [], "application/json", orjson.dumps(error), upstream_ms=ms, info=info)
        if not stream:
            return self._whole(spec, env, first, ms, info)
        options = env.body.get("stream_options")
        translator = gemini.ChatStream(
            model=env.model,
            completion_id=gemini_id("chatcmpl-"),
            created=int(time.time()),
            include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        )
        # Read until the first frame exists, so a provider that dies (or
        # refuses the prompt) before its first token is still handled here.
        decoder = gemini.SseDecoder()
        iterator = sent.rest
        assert iterator is not None  # a 2xx stream keeps its rest open
        try:
            frames, ended = await first_frames(first, iterator, decoder, translator)
        except gemini.Blocked as blocked:
            await response.aclose()
            return Exchange(
                spec, blocked.status, [], "application/json", orjson.dumps(blocked.to_dict()), upstream_ms=ms, info=info
            )
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
            stream=empty() if ended else converted(iterator, decoder, translator),
            close=response.aclose,
            upstream_ms=ms,
            info=info,
        )

    @staticmethod
    def _whole(spec: BackendSpec, env: Envelope, first: bytes, ms: float, info: dict) -> Exchange:
        try:
            answer = orjson.loads(first)
            if not isinstance(answer, dict):
                raise ValueError("not a JSON object")
            if env.endpoint == "chat/completions":
                out = gemini.chat_completion(
                    answer, model=env.model, completion_id=gemini_id("chatcmpl-"), created=int(time.time())
                )
            elif env.endpoint == "embeddings":
                out = gemini.embeddings(answer, model=env.model, request_body=env.body)
            else:
                body = orjson.dumps({"input_tokens": gemini.token_count(answer)})
                return Exchange(spec, 200, [], "application/json", body, upstream_ms=ms, info=info, wire=WIRE_ANTHROPIC)
        except gemini.Blocked as blocked:
            return Exchange(
                spec, blocked.status, [], "application/json", orjson.dumps(blocked.to_dict()), upstream_ms=ms, info=info
            )
        except (ValueError, RouterError) as exc:  # orjson's decode error is a ValueError
            raise UpstreamFailed(
                f"{spec.name} answered something unusable: {exc}", error=UpstreamBadResponse
            ) from exc
        info["usage"] = out.get("usage")
        return Exchange(spec, 200, [], "application/json", orjson.dumps(out), upstream_ms=ms, info=info)

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        """The converted whole body (`start` already built it)."""
        return ex.body, {"usage": ex.info.get("usage")}

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        return relay(ex, done, passed=(gemini.Blocked,))


gemini_id = prefixed_id  # `chatcmpl-<hex>`: the id shape OpenAI uses


GEMINI = GeminiProvider()
