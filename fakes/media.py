"""The rest of the OpenAI surface on the fake OpenAI-compatible backend.

Real wire formats (OpenAI's API reference, as the official SDK's types
read them; vLLM's rerank and score protocol):

- `POST /v1/images/generations` (JSON; `stream: true` gives the
  `image_generation.partial_image` / `.completed` events), `/v1/images/edits` and
  `/v1/images/variations` (multipart: `image` or `image[]` files, `prompt`):
  an `ImagesResponse` (`created`, `data` of `b64_json` or `url` images,
  `usage` for edits and generations);
- `POST /v1/audio/transcriptions` and `/v1/audio/translations` (multipart:
  `file`, `model`, `response_format`, `stream`): `{"text": …, "usage": …}`,
  `verbose_json`, or plain `text` / `srt` / `vtt`; with `stream` true the
  `transcript.text.delta` / `transcript.text.done` events;
- `POST /v1/audio/speech` (JSON): the audio bytes (`audio/mpeg` for mp3…),
  written in `Behavior.chunks` chunks; after the first one the answer waits
  for `Behavior.hold` (a threading.Event) when one is set, so a test can see
  the first bytes arrive while the backend is still answering;
- `POST /v1/moderations`: `{"id", "model", "results": [...]}`, one result per
  input, flagged when the text says "kill";
- vLLM's `POST /rerank`, `/v1/rerank`, `/v2/rerank` (`query`, `documents`,
  `top_n`): `{"id", "model", "usage", "results": [{"index", "document":
  {"text"}, "relevance_score"}]}` best first; `POST /score`, `/v1/score`
  (`text_1`, `text_2`): `{"id", "object": "list", "created", "model",
  "data": [{"index", "object": "score", "score"}], "usage"}`.

Scores are the share of the document's words found in the query: stable,
and the order a test can predict. Every answer says which backend gave it
(`x-backend-name`, and in the text of transcriptions).
"""

from __future__ import annotations

import asyncio
import base64
import email.parser
import email.policy
import time
from typing import Any

import orjson
from aiohttp import web

from .server import count_tokens

# A 1×1 transparent PNG: what every generated image is.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
_AUDIO_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
_CATEGORIES = (
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
    "self-harm", "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence",
    "violence/graphic",
)


class Form:
    """A multipart/form-data body read with the standard library's MIME parser
    (independent of the router's own reader)."""

    def __init__(self, content_type: str, body: bytes) -> None:
        head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        self.fields: dict[str, str] = {}
        self.files: dict[str, list[tuple[str, bytes]]] = {}
        if not message.is_multipart():
            return
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if not isinstance(name, str):
                continue
            raw = part.get_payload(decode=True)
            payload = raw if isinstance(raw, bytes) else b""
            filename = part.get_filename()
            if filename is not None:
                self.files.setdefault(name, []).append((filename, payload))
            else:
                self.fields.setdefault(name, payload.decode("utf-8", "replace"))


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), content_type="application/json")


def _relevance(query: str, document: str) -> float:
    words = {w.strip(".,?!").lower() for w in query.split()}
    doc = [w.strip(".,?!").lower() for w in document.split()]
    return round(sum(1 for w in doc if w in words) / max(len(doc), 1), 6)


class Media:
    """The handlers; `fake` is the OpenAI fake they belong to (its name,
    `Behavior` and request recording through `fake.faults`)."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake

    async def _json_body(self, request: web.Request) -> tuple[dict[str, Any] | None, web.Response | None]:
        return await self.fake._begin(request)

    async def _form(self, request: web.Request) -> tuple[Form | None, web.Response | None]:
        body, _, err = await self.fake.faults.begin(request)
        if err is not None:
            return None, err
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            return None, _error(400, "Invalid Content-Type header, expected multipart/form-data.")
        form = Form(content_type, body)
        if not form.fields.get("model"):
            return None, _error(400, "you must provide a model parameter", "model")
        return form, None

    # -- images ------------------------------------------------------------------

    def _images(self, n: Any, response_format: Any, prompt: str) -> dict[str, Any]:
        count = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
        if response_format == "url":
            item: dict[str, Any] = {"url": f"https://images.invalid/{self.fake.name}.png"}
        else:
            item = {"b64_json": base64.b64encode(PNG).decode()}
        tokens = count_tokens(prompt)
        return {
            "created": int(time.time()),
            "data": [dict(item) for _ in range(count)],
            "usage": {
                "input_tokens": tokens,
                "input_tokens_details": {"image_tokens": 0, "text_tokens": tokens},
                "output_tokens": 16 * count,
                "total_tokens": tokens + 16 * count,
            },
        }

    async def image_generations(self, request: web.Request) -> web.StreamResponse:
        data, err = await self._json_body(request)
        if err is not None:
            return err
        assert data is not None
        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            return _error(400, "'prompt' is a required property", "prompt")
        if data.get("stream") is True:
            return await self._image_stream(request, data, prompt)
        return _json(self._images(data.get("n"), data.get("response_format"), prompt))

    async def _image_stream(self, request: web.Request, data: dict[str, Any], prompt: str) -> web.StreamResponse:
        """`stream: true`: `partial_images` partial events, then the completed one."""
        w = await self.fake._stream(request)
        common = {"background": "opaque", "created_at": int(time.time()), "output_format": "png",
                  "quality": "low", "size": "1024x1024", "b64_json": base64.b64encode(PNG).decode()}
        partials = data.get("partial_images")
        for i in range(partials if isinstance(partials, int) and 0 < partials <= 3 else 0):
            event = {"type": "image_generation.partial_image", "partial_image_index": i, **common}
            await w.send(b"event: image_generation.partial_image\ndata: " + orjson.dumps(event) + b"\n\n")
        usage = self._images(1, None, prompt)["usage"]
        done = {"type": "image_generation.completed", "usage": usage, **common}
        await w.send(b"event: image_generation.completed\ndata: " + orjson.dumps(done) + b"\n\n")
        return await w.finish()

    async def image_edits(self, request: web.Request) -> web.Response:
        form, err = await self._form(request)
        if err is not None:
            return err
        assert form is not None
        if not (form.files.get("image") or form.files.get("image[]")):
            return _error(400, "'image' is a required property", "image")
        prompt = form.fields.get("prompt", "")
        if not prompt:
            return _error(400, "'prompt' is a required property", "prompt")
        return _json(self._images(int(form.fields.get("n", "1") or 1), form.fields.get("response_format"), prompt))

    async def image_variations(self, request: web.Request) -> web.Response:
        form, err = await self._form(request)
        if err is not None:
            return err
        assert form is not None
        if not form.files.get("image"):
            return _error(400, "'image' is a required property", "image")
        body = self._images(int(form.fields.get("n", "1") or 1), form.fields.get("response_format"), "")
        del body["usage"]
        return _json(body)

    # -- audio -------------------------------------------------------------------

    async def transcriptions(self, request: web.Request) -> web.StreamResponse:
        return await self._transcribe(request, "transcribe")

    async def translations(self, request: web.Request) -> web.StreamResponse:
        return await self._transcribe(request, "translate")

    async def _transcribe(self, request: web.Request, task: str) -> web.StreamResponse:
        form, err = await self._form(request)
        if err is not None:
            return err
        assert form is not None
        files = form.files.get("file")
        if not files:
            return _error(400, "'file' is a required property", "file")
        size = len(files[0][1])
        text = f"Heard {size} bytes on {self.fake.name}."
        seconds = round(size / 16000, 3)
        usage = {"type": "duration", "seconds": seconds}
        if form.fields.get("stream") == "true":
            w = await self.fake._stream(request)
            for word in text.split(" "):
                delta = {"type": "transcript.text.delta", "delta": word + " "}
                await w.send(b"data: " + orjson.dumps(delta) + b"\n\n")
            done = {"type": "transcript.text.done", "text": text, "usage": usage}
            await w.send(b"data: " + orjson.dumps(done) + b"\n\n")
            return await w.finish()
        fmt = form.fields.get("response_format", "json")
        if fmt == "text":
            return web.Response(text=text, content_type="text/plain")
        if fmt in ("srt", "vtt"):
            head = "WEBVTT\n\n" if fmt == "vtt" else "1\n"
            return web.Response(text=f"{head}00:00:00,000 --> 00:00:01,000\n{text}\n", content_type="text/plain")
        if fmt == "verbose_json":
            return _json({"task": task, "language": "english", "duration": seconds, "text": text, "segments": []})
        return _json({"text": text, "usage": usage})

    async def speech(self, request: web.Request) -> web.StreamResponse:
        data, err = await self._json_body(request)
        if err is not None:
            return err
        assert data is not None
        text = data.get("input")
        if not isinstance(text, str) or not text:
            return _error(400, "'input' is a required property", "input")
        if not isinstance(data.get("voice"), (str, dict)):
            return _error(400, "'voice' is a required property", "voice")
        fmt = data.get("response_format", "mp3")
        content_type = _AUDIO_TYPES.get(fmt if isinstance(fmt, str) else "", "audio/mpeg")
        behavior = self.fake.behavior
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        chunks = max(behavior.chunks, 1)
        for i in range(chunks):
            if i == 1 and behavior.hold is not None:
                await asyncio.to_thread(behavior.hold.wait)
            await response.write(self.audio_chunk(i, text))
        await response.write_eof()
        return response

    def audio_chunk(self, i: int, text: str) -> bytes:
        """Chunk `i` of the speech of `text` (what a test compares with)."""
        return f"[{self.fake.name}:{i}:{text}]".encode() + bytes(range(256)) * 4

    # -- moderations --------------------------------------------------------------

    async def moderations(self, request: web.Request) -> web.Response:
        data, err = await self._json_body(request)
        if err is not None:
            return err
        assert data is not None
        inp = data.get("input")
        items = [inp] if isinstance(inp, str) else inp
        if not isinstance(items, list) or not items:
            return _error(400, "'input' is a required property", "input")
        results = []
        for item in items:
            flagged = isinstance(item, str) and "kill" in item.lower()
            results.append(
                {
                    "flagged": flagged,
                    "categories": {c: flagged and c == "violence" for c in _CATEGORIES},
                    "category_scores": {c: 0.9 if flagged and c == "violence" else 0.001 for c in _CATEGORIES},
                    "category_applied_input_types": {c: ["text"] for c in _CATEGORIES},
                }
            )
        return _json({"id": self.fake.ids("modr"), "model": data["model"], "results": results})

    # -- vLLM rerank / score -------------------------------------------------------

    async def rerank(self, request: web.Request) -> web.Response:
        data, err = await self._json_body(request)
        if err is not None:
            return err
        assert data is not None
        query, documents = data.get("query"), data.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list) or not documents:
            return _error(400, "'query' and 'documents' are required", "documents")
        top_n = data.get("top_n") or len(documents)
        scores = [_relevance(query, str(d)) for d in documents]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])
        scored = [{"index": i, "document": {"text": documents[i]}, "relevance_score": scores[i]} for i in order]
        tokens = count_tokens(query, *map(str, documents))
        return _json(
            {
                "id": self.fake.ids("rerank"),
                "model": data["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                "results": scored[:top_n],
            }
        )

    async def score(self, request: web.Request) -> web.Response:
        data, err = await self._json_body(request)
        if err is not None:
            return err
        assert data is not None
        left, right = data.get("text_1"), data.get("text_2")
        lefts = [left] if isinstance(left, str) else left
        rights = [right] if isinstance(right, str) else right
        if not isinstance(lefts, list) or not isinstance(rights, list) or not lefts or not rights:
            return _error(400, "'text_1' and 'text_2' are required", "text_1")
        if len(lefts) == 1:
            lefts = lefts * len(rights)
        if len(lefts) != len(rights):
            return _error(400, "text_1 and text_2 must have the same length", "text_2")
        tokens = count_tokens(*map(str, lefts), *map(str, rights))
        return _json(
            {
                "id": self.fake.ids("score"),
                "object": "list",
                "created": int(time.time()),
                "model": data["model"],
                "data": [
                    {"index": i, "object": "score", "score": _relevance(str(a), str(b))}
                    for i, (a, b) in enumerate(zip(lefts, rights, strict=True))
                ],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
            }
        )


def add_routes(router: web.UrlDispatcher, fake: Any) -> None:
    """Serve the surface on `router` for the OpenAI fake `fake`."""
    media = Media(fake)
    router.add_post("/v1/images/generations", media.image_generations)
    router.add_post("/v1/images/edits", media.image_edits)
    router.add_post("/v1/images/variations", media.image_variations)
    router.add_post("/v1/audio/transcriptions", media.transcriptions)
    router.add_post("/v1/audio/translations", media.translations)
    router.add_post("/v1/audio/speech", media.speech)
    router.add_post("/v1/moderations", media.moderations)
    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
        router.add_post(path, media.rerank)
    for path in ("/score", "/v1/score"):
        router.add_post(path, media.score)
