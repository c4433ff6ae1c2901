"""The Ollama provider, normalized path (MIX-5): it speaks its native API.

The request is converted (the pure modules of this package) *after* the
provider was selected and *before* anything is dispatched: a required field
that cannot be converted is a 400 `unsupported_parameter`, and nothing goes
upstream. Ollama's JSON / NDJSON answers are converted back into the exact
OpenAI shapes. Ignored fields are recorded in the observation only.
Probed at `GET /api/tags`, which is also its model listing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from ...core.backend import BackendSpec
from ...core.errors import RouterError, UnsupportedParameter, UpstreamBadResponse
from ...request import Envelope
from .. import ollama  # this package's pure conversions (its __init__)
from ..base import Exchange, UpstreamFailed
from ..estimate import estimated_count
from ..http import bearer_probe_headers, provider_headers, send
from ..normalized import prefixed_id
from ..relay import EARLY_FAILURES, converted, empty, failed_early, first_frames, relay

_ENDPOINTS = {
    "chat/completions": ("/api/chat", ollama.chat_request),
    "responses": ("/api/chat", ollama.responses_request),
    "embeddings": ("/api/embed", ollama.embed_request),
}


class OllamaProvider:
    """Ollama's native API (`/api/chat`, `/api/embed`, `/api/tags`)."""

    kinds = frozenset({"ollama"})
    path = "normalized"

    def probe_url(self, spec: BackendSpec, path: str) -> str | None:
        """`/api/tags` under the URL as configured; health.path is for
        OpenAI-compatible servers and does not apply."""
        del path
        return spec.url.rstrip("/") + "/api/tags"

    def probe_headers(self, spec: BackendSpec) -> dict[str, str]:
        return bearer_probe_headers(spec)

    def load_url(self, spec: BackendSpec, path: str) -> str | None:
        return None  # publishes no load the router reads

    def listed_models(self, data: dict[str, Any]) -> list[str] | None:
        """Model names from an `/api/tags` answer."""
        return [m["id"] for m in ollama.models_from_tags(data, owned_by="ollama")]

    async def start(self, rt, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        if env.endpoint == "messages/count_tokens":  # no count endpoint: the marked estimate
            return estimated_count(spec, env.body, model)
        route = _ENDPOINTS.get(env.endpoint)
        if route is None:
            raise UnsupportedParameter(
                f"/v1/{env.endpoint} is not available from the selected provider (Ollama); "
                "use /v1/chat/completions or /v1/responses.",
            )
        api_path, convert = route
        served = spec.served_name(model)
        conversion = convert(env.body, served)  # raises before dispatch
        base = spec.url[:-3] if spec.url.endswith("/v1") else spec.url
        sent = await send(
            rt.transport, spec, base + api_path, content=orjson.dumps(conversion.request),
            headers=provider_headers(spec), stream=env.stream, max_bytes=env.max_response_bytes,
        )
        response, first, ms = sent.response, sent.first, sent.ms
        info: dict[str, Any] = {
            "served": served,
            "adapter": "ollama",
            "ignored_fields": conversion.ignored_fields,
            "notes": conversion.notes,
        }
        if response.status_code >= 400:
            status, error = ollama.error_from_ollama(response.status_code, first)
            return Exchange(spec, status, [], "application/json", orjson.dumps(error), upstream_ms=ms, info=info)
        now = int(time.time())
        if not env.stream:
            try:
                answer = orjson.loads(first)
                if env.endpoint == "chat/completions":
                    out = ollama.chat_completion(answer, model=env.model, completion_id=ollama_id("chatcmpl-"), created=now)
                elif env.endpoint == "responses":
                    out = ollama.response_object(answer, model=env.model, response_id=ollama_id("resp_"),
                                                 created_at=now, request_body=env.body)
                else:
                    out = ollama.embeddings(answer, model=env.model, encoding_format=env.body.get("encoding_format"))
            except (orjson.JSONDecodeError, RouterError) as exc:
                raise UpstreamFailed(
                    f"{spec.name} answered something unusable: {exc}", error=UpstreamBadResponse
                ) from exc
            info["usage"] = out.get("usage")
            return Exchange(spec, 200, [], "application/json", orjson.dumps(out), upstream_ms=ms, info=info)
        # Streaming: turn NDJSON into SSE; read until the first frame exists so
        # a provider that dies before its first token is still retried.
        translator: ollama.ChatStream | ollama.ResponsesStream
        head: list[bytes] = []
        if env.endpoint == "chat/completions":
            options = env.body.get("stream_options")
            include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
            translator = ollama.ChatStream(model=env.model, completion_id=ollama_id("chatcmpl-"), created=now,
                                           include_usage=include_usage)
        else:
            responses = ollama.ResponsesStream(model=env.model, response_id=ollama_id("resp_"), created_at=now,
                                               request_body=env.body)
            head = responses.start()
            translator = responses
        decoder = ollama.NdjsonDecoder()
        iterator = sent.rest
        assert iterator is not None  # a 2xx stream keeps its rest open
        try:
            frames, ended = await first_frames(first, iterator, decoder, translator)
        except EARLY_FAILURES as exc:
            await response.aclose()
            raise failed_early(spec.name, exc) from exc
        info["translator"] = translator
        return Exchange(
            spec, 200, [], "text/event-stream", b"".join(head + frames),
            stream=empty() if ended else converted(iterator, decoder, translator),
            close=response.aclose, upstream_ms=ms, info=info,
        )

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        """The converted whole body (`start` already built it)."""
        return ex.body, {"usage": ex.info.get("usage")}

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        return relay(ex, done)


ollama_id = prefixed_id  # `chatcmpl-<hex>` / `resp_<hex>`: the id shapes OpenAI uses


OLLAMA = OllamaProvider()
