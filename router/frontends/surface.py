"""The rest of the OpenAI surface: images, audio, moderations, rerank, score.

Passthrough only: these endpoints are relayed to OpenAI-compatible backends
(vLLM, SGLang, OpenAI's own API…) as the client sent them. A backend of a
kind that cannot serve one (Anthropic, Gemini, Ollama, a CLI) is refused with
400 `unsupported_endpoint`, naming the kind, before any upstream call
(router/pipeline.py asks the provider registry, `providers.serves`).

 1 the body, within the body limit (server.max_body_bytes: 413 past it,
   before the rest is read), kept so that a retry elsewhere can send it
   again: JSON is held in memory like any /v1 body; `multipart/form-data`,
   for the endpoints that take a file, is spooled as it arrives
   (`receive_form`: memory while small, an anonymous file on disk past
   1 MiB; router/spool.py) while its small fields are read on the way
   (router/multipart.py). The file bytes are never parsed, and never held
   whole in memory: they go upstream from the spool, piece by piece
 2 the model: the JSON `model`, or the form's `model` field  → 400 missing_model
 3 admit, the key's model check, route — exactly as /v1/embeddings
   (router/frontends/openai.py): selection, retries, fallbacks, the key gate,
   per-key usage, the observation
 4 the answer as it comes: JSON, SSE for a stream, or the audio bytes of
   /v1/audio/speech relayed chunk by chunk, never held whole

vLLM serves rerank at `/rerank`, `/v1/rerank` and `/v2/rerank`; each is
relayed to the same path on the backend (`Envelope.notes["path"]`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from .. import spool as spooling
from .. import tracing
from ..admission import Request, admit, headers_of, ready_snapshot
from ..core.errors import (
    BodiesPending,
    BodyNotKept,
    DuplicateKey,
    InvalidRequest,
    MissingModel,
    RequestTooLarge,
    RouterError,
    UnsupportedMediaType,
)
from ..multipart import Form, FormReader, boundary_of
from ..pipeline import Routed, refused, route
from ..request import Envelope, check_content_type, loads_object
from ..spool import Full, Spool
from . import direct

log = logging.getLogger(__name__)

# What an answer may be (`Surface.answer`): JSON; any media type (a
# transcription as text, SRT or VTT); or binary audio, always relayed as it
# comes (never read whole, whatever its length).
JSON = "json"
ANY = "any"
BINARY = "binary"


@dataclass(frozen=True, slots=True)
class Surface:
    """One endpoint of the surface: its name (observations, the kind check),
    whether its body is a form, and what its answer is."""

    endpoint: str
    form: bool
    answer: str


_RERANK = Surface("rerank", False, JSON)

# Exact paths, POST only (config/asgi.py sends them here).
PATHS: dict[str, Surface] = {
    "/v1/images/generations": Surface("images/generations", False, JSON),
    "/v1/images/edits": Surface("images/edits", True, JSON),
    "/v1/images/variations": Surface("images/variations", True, JSON),
    "/v1/audio/transcriptions": Surface("audio/transcriptions", True, ANY),
    "/v1/audio/translations": Surface("audio/translations", True, ANY),
    "/v1/audio/speech": Surface("audio/speech", False, BINARY),
    "/v1/moderations": Surface("moderations", False, JSON),
    "/v1/rerank": _RERANK,
    "/rerank": _RERANK,
    "/v2/rerank": _RERANK,
    "/v1/score": Surface("score", False, JSON),
}
# The endpoint names, for the provider registry's kind check.
ENDPOINTS: frozenset[str] = frozenset(s.endpoint for s in PATHS.values())
# The paths outside /v1 (config/asgi.py sends them to the /v1 serving too).
ROOT_PATHS: frozenset[str] = frozenset(p for p in PATHS if not p.startswith("/v1/"))

_TRUE = frozenset({"true", "True", "1"})


def takes_form(path: str) -> bool:
    surface = PATHS.get(path)
    return surface is not None and surface.form


@dataclass(slots=True)
class Received:
    """A form as `receive_form` kept it: the spooled body and its small
    fields, or why it is refused (answered by the door, observed as its
    other refusals are). `close` frees the spool once the answer is over."""

    spool: Spool
    form: Form | None
    error: RouterError | None

    def close(self) -> None:
        self.spool.close()


async def receive_form(scope: dict[str, Any], receive, send) -> Received | None:
    """The body of a POST on a form path, spooled while its fields are read;
    None once it was refused (413, 503 when the process's spool budget is
    spent) or its client went away. A malformed form is still read to its end
    (within the limit, nothing more kept) so the refusal is an answer to the
    whole request."""
    limit = direct.body_limit()
    if direct.declared_length(scope) > limit:
        await direct.send_too_large(send, limit)
        return None
    content_type = next((v.decode("latin1") for k, v in scope.get("headers", ()) if k == b"content-type"), "")
    error: RouterError | None = None
    reader: FormReader | None = None
    try:
        boundary = boundary_of(content_type)
        if boundary is None:
            error = UnsupportedMediaType(
                f"{scope['path']} takes multipart/form-data (a file and its fields), "
                f"not '{content_type.partition(';')[0].strip()[:100] or 'no Content-Type'}'."
            )
        else:
            reader = FormReader(boundary)
    except RouterError as exc:
        error = exc
    spool = Spool(memory=direct.PENDING)
    size = 0
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                spool.close()
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                spool.close()
                await direct.send_too_large(send, limit)
                return None
            if error is None and reader is not None:
                try:
                    reader.feed(chunk)
                except RouterError as exc:
                    error = exc
                    spool.close()  # nothing more is kept
                else:
                    await spool.write(chunk)
            if not message.get("more_body", False):
                break
        form = None
        if error is None and reader is not None:
            await spool.finish()
            try:
                form = reader.finish()
            except RouterError as exc:
                error = exc
        return Received(spool, form, error)
    except Full:
        spool.close()
        await direct.send_error(send, BodiesPending(headers={"Retry-After": "1"}))
        return None
    except OSError as exc:  # the spool's disk: full, gone, not writable
        spool.close()
        log.error("a form could not be spooled under %s: %s", spooling.DIRECTORY, exc.strerror or type(exc).__name__)
        await direct.send_error(send, BodyNotKept(headers={"Retry-After": "1"}))
        return None
    except BaseException:
        spool.close()
        raise


async def routed_or_refusal(call: Request, path: str, raw: bytes | Received) -> Routed | RouterError:
    """Parse, admit, check the model, route: the routed answer or the (observed) refusal."""
    surface = PATHS[path]
    started = time.perf_counter()
    obs: dict[str, Any] = {"endpoint": surface.endpoint, "frontend": "openai"}
    trace = None
    try:
        snap = await ready_snapshot()
        headers = headers_of(call)
        if tracing.ENABLED:
            trace = tracing.begin("POST", path, surface.endpoint, headers)
        if isinstance(raw, Received):  # a form (`receive_form` checked its size as it came)
            body, model, stream, notes = _form_parsed(surface, raw)
            raw = b""
        else:
            if len(raw) > snap.max_body_bytes:
                raise RequestTooLarge(
                    f"The request body is {len(raw)} bytes; the limit is {snap.max_body_bytes} bytes."
                )
            body, model, stream, notes = _parsed(surface, raw, headers.get("content-type") or "")
        notes["path"] = path
        obs["model"] = model
        caller = await admit(call, snap, headers=headers, body=body, obs=obs)
        target = caller.pinned or model
        caller.check_model(target)
        env = Envelope(
            endpoint=surface.endpoint, raw=raw, body=body, model=model, stream=stream, headers=headers,
            client_ip=caller.client_ip, host=caller.host, request_id=caller.request_id,
            max_response_bytes=snap.max_response_bytes, relay_whole=True, notes=notes,
        )
        if trace is not None:
            env.notes["trace"] = trace
        return await route(caller, env, target, obs, started)
    except RouterError as exc:
        refused(exc, obs, started, trace)
        return exc


def _form_parsed(surface: Surface, received: Received) -> tuple[dict[str, Any], str, bool, dict[str, Any]]:
    """A form's (fields the router reads, model, stream, notes for the provider)."""
    if received.error is not None:
        raise received.error
    form = received.form
    assert form is not None
    if "model" in form.repeated:
        raise DuplicateKey("The form has the field 'model' more than once; send it once.", param="model")
    body: dict[str, Any] = dict(form.fields)
    stream = body.get("stream", "false") in _TRUE
    return body, _model(surface, body), stream, {"surface": surface, "form": form, "spool": received.spool}


def _parsed(surface: Surface, raw: bytes, content_type: str) -> tuple[dict[str, Any], str, bool, dict[str, Any]]:
    """A JSON body's (fields, model, stream, notes for the provider)."""
    if surface.form:  # a form path's body always comes through `receive_form`
        raise UnsupportedMediaType(f"/v1/{surface.endpoint} takes multipart/form-data (a file and its fields).")
    check_content_type(content_type)
    body = loads_object(raw)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean.", param="stream")
    if surface.endpoint == "audio/speech":  # its stream is `stream_format: "sse"`; audio otherwise
        stream = body.get("stream_format") == "sse"
    return body, _model(surface, body), stream, {"surface": surface}


def _model(surface: Surface, body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None or model == "":
        raise MissingModel(
            f"You must provide a model parameter: the router picks the backend of /v1/{surface.endpoint} by it.",
            param="model",
        )
    if not isinstance(model, str):
        raise InvalidRequest("'model' must be a string.", param="model")
    return model
