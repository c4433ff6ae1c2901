"""A fake OpenAI-compatible backend (think vLLM) speaking the real wire format.

    python -m fakes.openai_backend --host 127.0.0.1 --port 8001 \\
        --name demo-a --models demo,demo-mini [--quiet]

Endpoints: GET /v1/models, GET /health, POST /v1/chat/completions,
/v1/completions, /v1/embeddings, /v1/responses (each streaming as OpenAI
does: SSE `data:` frames ending in `data: [DONE]`, or typed `event:` frames
for the Responses API); and the rest of the surface (fakes/media.py):
/v1/images/*, /v1/audio/*, /v1/moderations, vLLM's rerank and score.  Every response carries `x-backend-name`; the reply
text says "Hello from <name>." and `model` echoes the request (as vLLM does).
Any model name is accepted; `models` is what /v1/models lists.
A stream with `stream_options.include_usage` ends with the usage chunk
(`"choices":[]`) before `data: [DONE]`, and its other chunks carry
`"usage":null`, as OpenAI's (and vLLM's Completions) do; without it no chunk
has a `usage` key.

Prompt cache and load, as vLLM reports them (fakes/kvcache.py): a chat
prompt's leading 16-word blocks already seen (LRU) come back as
`usage.prompt_tokens_details.cached_tokens`; `GET /metrics` publishes the
requests running and waiting, the KV-cache usage and the prefix-cache
counters under vLLM's metric names.

A chat-only server (`responses_status=404`, or 405): `/v1/responses` answers
that status as llama.cpp's server does for a path it lacks
(`{"error": {"code": 404, "message": "File Not Found", "type":
"not_found_error"}}`); every other endpoint is served as usual.

Tool calls: when the request has `tools` and the last user message mentions
"weather" (or `tool_choice` requires a tool), the reply is a tool call.
`max_tokens` / `max_completion_tokens` / `max_output_tokens` no larger than
the reply's piece count truncate it (`finish_reason: "length"`).

Warm-up: while `Behavior.loading_until` (wall clock) is ahead, every path
answers 503 `{"error": {"code": 503, "message": "Loading model", "type":
"unavailable_error"}}`, as llama.cpp's server does while it loads a model.
"""

from __future__ import annotations

import base64
import struct
import time
from typing import Any

import orjson
from aiohttp import web

from .kvcache import PromptCache
from .media import add_routes as add_media_routes
from .server import (
    FAKE_KEY,
    JSON_CT,
    MAX_BODY,
    Behavior,
    Faults,
    IdGen,
    Recorded,
    ServerThread,
    StreamWriter,
    cli,
    count_tokens,
    embedding_vector,
    last_user_text,
    messages_text,
    reply_pieces,
    split_text,
    thread_for,
    tool_arguments,
)

__all__ = ["main", "make_app", "server_thread"]

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
}
JSON_HEADERS = {"Content-Type": JSON_CT}
DONE = b"data: [DONE]\n\n"
LOADING_BODY = orjson.dumps({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "model_not_found"),
    408: ("timeout_error", None),
    409: ("conflict_error", None),
    422: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}


def error_body(status: int, message: str, *, param: str | None = None, code: Any = None) -> bytes:
    typ, default_code = _ERROR_TYPES.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": typ,
                "param": param,
                "code": code if code is not None else default_code,
            }
        }
    )


def error_response(status: int, message: str, *, param: str | None = None, code: Any = None) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(status, message, param=param, code=code),
        headers=JSON_HEADERS,
    )


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), headers=JSON_HEADERS)


def _limit(data: dict[str, Any], *keys: str) -> int | None:
    for k in keys:
        v = data.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _pick_tool(tools: Any, tool_choice: Any, user_text: str, *, flat: bool) -> dict[str, Any] | None:
    """The tool to call, or None.  `flat` = Responses API tool shape."""
    if not isinstance(tools, list) or not tools:
        return None
    fns = []
    for t in tools:
        if not isinstance(t, dict) or t.get("type", "function") != "function":
            continue
        fn = t if flat else t.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            fns.append(fn)
    if not fns or tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        wanted = tool_choice.get("name") if flat else (tool_choice.get("function") or {}).get("name")
        for fn in fns:
            if fn["name"] == wanted:
                return fn
    if tool_choice == "required" or isinstance(tool_choice, dict) or "weather" in user_text.lower():
        for fn in fns:
            if "weather" in fn["name"].lower():
                return fn
        return fns[0]
    return None


def _responses_user_text(inp: Any) -> str:
    if isinstance(inp, str):
        return inp
    if isinstance(inp, list):
        if inp and isinstance(inp[-1], dict) and inp[-1].get("type") == "function_call_output":
            return ""
        for item in reversed(inp):
            if isinstance(item, dict) and item.get("role") == "user":
                return last_user_text([item])
    return ""


def _responses_input_texts(inp: Any, instructions: Any) -> list[Any]:
    texts: list[Any] = [instructions] if isinstance(instructions, str) else []
    if isinstance(inp, str):
        texts.append(inp)
    elif isinstance(inp, list):
        for item in inp:
            if isinstance(item, dict):
                c = item.get("content", item.get("output"))
                if isinstance(c, list):
                    texts.extend(p.get("text") for p in c if isinstance(p, dict))
                else:
                    texts.append(c)
    return texts


class _OpenAIFake:
    def __init__(
        self,
        name: str,
        models: list[str],
        behavior: Behavior,
        requests: list[Recorded] | None,
    ) -> None:
        self.name = name
        self.models = list(models)
        self.behavior = behavior
        self.faults = Faults(behavior, requests, error_response)
        self.ids = IdGen()
        self.name_header = {"x-backend-name": name}
        now = int(time.time())
        self.models_list_data = [
            {
                "id": m,
                "object": "model",
                "created": now,
                "owned_by": name,
                "root": m,
                "parent": None,
            }
            for m in self.models
        ]
        self.models_body = orjson.dumps({"object": "list", "data": self.models_list_data})
        self.cache = PromptCache()

    # -- common --------------------------------------------------------------

    async def _begin(self, request: web.Request) -> tuple[dict[str, Any] | None, web.Response | None]:
        body, data, err = await self.faults.begin(request)
        if err is not None:
            return None, err
        if not isinstance(data, dict):
            if not body:
                return None, error_response(
                    400,
                    "We could not parse the JSON body of your request. (HINT: "
                    "This likely means you aren't using your HTTP library correctly.)",
                )
            return None, error_response(
                400,
                "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
                "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
                "valid JSON.)",
            )
        model = data.get("model")
        if not isinstance(model, str) or not model:
            return None, error_response(400, "you must provide a model parameter", param="model")
        return data, None

    def _pieces(self, limit: int | None) -> tuple[tuple[str, ...], str]:
        pieces = reply_pieces(self.name, self.behavior.chunks)
        if limit is not None and limit <= len(pieces):
            return pieces[: max(limit, 0)], "length"
        return pieces, "stop"

    async def _stream(self, request: web.Request) -> StreamWriter:
        w = StreamWriter(web.StreamResponse(headers=SSE_HEADERS), request, self.behavior)
        await w.start()
        return w

    # -- GET -------------------------------------------------------------------

    async def models_list(self, request: web.Request) -> web.Response:
        return web.Response(body=self.models_body, headers=JSON_HEADERS)

    async def model_get(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        for entry in self.models_list_data:
            if entry["id"] == model:
                return _json(entry)
        return error_response(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            code="model_not_found",
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.behavior.metrics:
            return web.Response(status=404, text="404: Not Found")
        b = self.behavior
        text = self.cache.metrics(self.models[0] if self.models else "", b.waiting, b.extra_running)
        return web.Response(body=text, content_type="text/plain", charset="utf-8")

    # -- chat completions -------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return error_response(400, "'messages' is a required property", param="messages")
        model = data["model"]
        created = int(time.time())
        cid = self.ids("chatcmpl-")
        words = " ".join(t for t in messages_text(messages) if isinstance(t, str)).split()
        prompt_tokens = max(len(words), 1)
        cached_tokens = self.cache.serve(words)
        tool = _pick_tool(
            data.get("tools"),
            data.get("tool_choice"),
            last_user_text(messages),
            flat=False,
        )
        if tool is not None:
            args = orjson.dumps(tool_arguments(tool.get("parameters"))).decode()
            call_id = self.ids("call_")
            finish = "tool_calls"
            completion_tokens = count_tokens(args)
        else:
            pieces, finish = self._pieces(_limit(data, "max_completion_tokens", "max_tokens"))
            completion_tokens = len(pieces)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }

        if not data.get("stream"):
            if tool is not None:
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": tool["name"], "arguments": args},
                        }
                    ],
                }
            else:
                message = {
                    "role": "assistant",
                    "content": "".join(pieces),
                    "refusal": None,
                }
            return _json(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "logprobs": None,
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                    "system_fingerprint": None,
                }
            )

        include_usage = bool((data.get("stream_options") or {}).get("include_usage"))
        head = orjson.dumps(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
        )
        prefix = b"data: " + head[:-1] + b',"choices":['
        suffix = b'],"usage":null}\n\n' if include_usage else b"]}\n\n"

        def frame(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            return (
                prefix
                + orjson.dumps(
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                )
                + suffix
            )

        w = await self._stream(request)
        if tool is not None:
            await w.send(
                frame(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": tool["name"], "arguments": ""},
                            }
                        ],
                    }
                )
            )
            for part in split_text(args, max(self.behavior.chunks, 1)):
                await w.send(frame({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
        else:
            await w.send(frame({"role": "assistant", "content": ""}))
            for piece in pieces:
                await w.send(frame({"content": piece}))
        await w.send(frame({}, finish))
        if include_usage:
            await w.send(prefix + b'],"usage":' + orjson.dumps(usage) + b"}\n\n")
        await w.send(DONE)
        return await w.finish()

    # -- legacy completions ------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        prompt = data.get("prompt")
        if prompt is None:
            return error_response(400, "'prompt' is a required property", param="prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list):
            prompt_tokens = sum(len(p) if isinstance(p, list) else count_tokens(p) for p in prompt) or 1
        else:
            prompt_tokens = count_tokens(prompt)
        model = data["model"]
        created = int(time.time())
        cid = self.ids("cmpl-")
        pieces, finish = self._pieces(_limit(data, "max_tokens"))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(pieces),
            "total_tokens": prompt_tokens + len(pieces),
        }
        if not data.get("stream"):
            return _json(
                {
                    "id": cid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "text": "".join(pieces),
                            "index": 0,
                            "logprobs": None,
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                    "system_fingerprint": None,
                }
            )
        include_usage = bool((data.get("stream_options") or {}).get("include_usage"))
        head = orjson.dumps({"id": cid, "object": "text_completion", "created": created, "model": model})
        prefix = b"data: " + head[:-1] + b',"choices":['
        suffix = b'],"usage":null}\n\n' if include_usage else b"]}\n\n"

        def frame(text: str, finish_reason: str | None = None) -> bytes:
            return (
                prefix
                + orjson.dumps(
                    {
                        "text": text,
                        "index": 0,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                )
                + suffix
            )

        w = await self._stream(request)
        for piece in pieces:
            await w.send(frame(piece))
        await w.send(frame("", finish))
        if include_usage:
            await w.send(prefix + b'],"usage":' + orjson.dumps(usage) + b"}\n\n")
        await w.send(DONE)
        return await w.finish()

    # -- embeddings ----------------------------------------------------------------

    async def embeddings(self, request: web.Request) -> web.Response:
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        inp = data.get("input")
        if isinstance(inp, str):
            items: list[Any] = [inp]
        elif isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp):
            items = [inp]  # one tokenized input
        elif isinstance(inp, list) and inp:
            items = inp
        else:
            return error_response(400, "'input' is a required property", param="input")
        dims = data.get("dimensions")
        if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
            dims = 8
        b64 = data.get("encoding_format") == "base64"
        out = []
        tokens = 0
        for i, item in enumerate(items):
            vec = embedding_vector(item, dims)
            tokens += len(item) if isinstance(item, list) else count_tokens(item)
            emb: Any = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if b64 else vec
            out.append({"object": "embedding", "index": i, "embedding": emb})
        return _json(
            {
                "object": "list",
                "data": out,
                "model": data["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    # -- responses API -------------------------------------------------------------

    def _response_obj(
        self,
        rid: str,
        created: int,
        data: dict[str, Any],
        status: str,
        output: list[Any],
        usage: dict[str, Any] | None,
        incomplete: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": rid,
            "object": "response",
            "created_at": created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": data.get("instructions"),
            "max_output_tokens": data.get("max_output_tokens"),
            "max_tool_calls": data.get("max_tool_calls"),
            "model": data["model"],
            "output": output,
            "parallel_tool_calls": data.get("parallel_tool_calls", True),
            "previous_response_id": data.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": data.get("store", True),
            "temperature": data.get("temperature", 1.0),
            "text": data.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": data.get("tool_choice", "auto"),
            "tools": data.get("tools") or [],
            "top_logprobs": data.get("top_logprobs", 0),
            "top_p": data.get("top_p", 1.0),
            "truncation": data.get("truncation", "disabled"),
            "usage": usage,
            "user": data.get("user"),
            "metadata": data.get("metadata") or {},
        }
        if status == "completed":
            obj["completed_at"] = int(time.time())
        return obj

    async def responses(self, request: web.Request) -> web.StreamResponse:
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        inp = data.get("input")
        if inp is None:
            return error_response(400, "Missing required parameter: 'input'.", param="input")
        created = int(time.time())
        rid = self.ids("resp_")
        input_tokens = count_tokens(*_responses_input_texts(inp, data.get("instructions")))
        tool = _pick_tool(
            data.get("tools"),
            data.get("tool_choice"),
            _responses_user_text(inp),
            flat=True,
        )
        incomplete = None
        if tool is not None:
            args = orjson.dumps(tool_arguments(tool.get("parameters"))).decode()
            item_id = self.ids("fc_")
            call_id = self.ids("call_")
            output_tokens = count_tokens(args)
            status = "completed"
            final_item: dict[str, Any] = {
                "id": item_id,
                "type": "function_call",
                "status": "completed",
                "arguments": args,
                "call_id": call_id,
                "name": tool["name"],
            }
        else:
            pieces, finish = self._pieces(_limit(data, "max_output_tokens"))
            output_tokens = len(pieces)
            status = "incomplete" if finish == "length" else "completed"
            if finish == "length":
                incomplete = {"reason": "max_output_tokens"}
            item_id = self.ids("msg_")
            text = "".join(pieces)
            final_part = {
                "type": "output_text",
                "annotations": [],
                "logprobs": [],
                "text": text,
            }
            final_item = {
                "id": item_id,
                "type": "message",
                "status": status,
                "content": [final_part],
                "role": "assistant",
            }
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
        final = self._response_obj(rid, created, data, status, [final_item], usage, incomplete)
        if not data.get("stream"):
            return _json(final)

        seq = 0

        def event(typ: str, payload: dict[str, Any]) -> bytes:
            nonlocal seq
            payload["type"] = typ
            payload["sequence_number"] = seq
            seq += 1
            return b"event: " + typ.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

        w = await self._stream(request)
        started = self._response_obj(rid, created, data, "in_progress", [], None)
        await w.send(event("response.created", {"response": started}))
        await w.send(event("response.in_progress", {"response": started}))
        if tool is not None:
            added = dict(final_item, status="in_progress", arguments="")
            await w.send(event("response.output_item.added", {"output_index": 0, "item": added}))
            for part in split_text(args, max(self.behavior.chunks, 1)):
                await w.send(
                    event(
                        "response.function_call_arguments.delta",
                        {"item_id": item_id, "output_index": 0, "delta": part},
                    )
                )
            await w.send(
                event(
                    "response.function_call_arguments.done",
                    {
                        "item_id": item_id,
                        "output_index": 0,
                        "name": tool["name"],
                        "arguments": args,
                    },
                )
            )
        else:
            added = {
                "id": item_id,
                "type": "message",
                "status": "in_progress",
                "content": [],
                "role": "assistant",
            }
            await w.send(event("response.output_item.added", {"output_index": 0, "item": added}))
            loc = {"item_id": item_id, "output_index": 0, "content_index": 0}
            empty_part = {
                "type": "output_text",
                "annotations": [],
                "logprobs": [],
                "text": "",
            }
            await w.send(event("response.content_part.added", {**loc, "part": empty_part}))
            for piece in pieces:
                await w.send(
                    event(
                        "response.output_text.delta",
                        {**loc, "delta": piece, "logprobs": []},
                    )
                )
            await w.send(event("response.output_text.done", {**loc, "text": text, "logprobs": []}))
            await w.send(event("response.content_part.done", {**loc, "part": final_part}))
        await w.send(event("response.output_item.done", {"output_index": 0, "item": final_item}))
        last = "response.completed" if status == "completed" else "response.incomplete"
        await w.send(event(last, {"response": final}))
        return await w.finish()


def make_app(
    name: str,
    models: list[str],
    behavior: Behavior | None = None,
    requests: list[Recorded] | None = None,
    *,
    responses_status: int | None = None,
) -> web.Application:
    """The fake OpenAI-compatible backend.  `requests=None` records nothing;
    `responses_status` (404, 405) makes it a chat-only server (module doc)."""
    fake = _OpenAIFake(name, models, behavior if behavior is not None else Behavior(), requests)
    @web.middleware
    async def loading(request: web.Request, handler: Any) -> web.StreamResponse:
        if fake.behavior.loading_until > time.time():
            return web.Response(status=503, body=LOADING_BODY, headers=JSON_HEADERS)
        return await handler(request)

    @web.middleware
    async def running(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
        fake.cache.running += 1
        try:
            return await handler(request)
        finally:
            fake.cache.running -= 1

    app = web.Application(client_max_size=MAX_BODY, middlewares=[loading, running, *fake.faults.middlewares])

    async def add_name(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-backend-name"] = name

    app.on_response_prepare.append(add_name)
    app[FAKE_KEY] = fake
    r = app.router
    r.add_get("/v1/models", fake.models_list)
    r.add_get("/v1/models/{model:.+}", fake.model_get)
    r.add_get("/health", fake.health)
    r.add_get("/metrics", fake.metrics)
    r.add_post("/v1/chat/completions", fake.chat)
    r.add_post("/v1/completions", fake.completions)
    r.add_post("/v1/embeddings", fake.embeddings)
    add_media_routes(r, fake)
    if responses_status is None:
        r.add_post("/v1/responses", fake.responses)
    else:
        r.add_post("/v1/responses", _not_served(fake, responses_status))
    return app


def _not_served(fake: _OpenAIFake, status: int):
    """The answer of a server that lacks the path (recorded like any POST)."""
    message = "File Not Found" if status == 404 else "Method Not Allowed"
    kind = "not_found_error" if status == 404 else "invalid_request_error"

    async def handler(request: web.Request) -> web.Response:
        _, err = await fake._begin(request)
        if err is not None:
            return err
        body = orjson.dumps({"error": {"code": status, "message": message, "type": kind}})
        return web.Response(status=status, body=body, headers=JSON_HEADERS)

    return handler


def server_thread(
    name: str = "demo-a",
    models: list[str] | tuple[str, ...] = ("demo",),
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    behavior: Behavior | None = None,
    responses_status: int | None = None,
) -> ServerThread:
    """A (not yet started) `ServerThread` serving this fake; use `with` or
    `.start()`. `responses_status`: a chat-only server (module doc)."""
    if responses_status is None:
        return thread_for(make_app, name, models, port=port, host=host, behavior=behavior)
    model_list = list(models)
    return ServerThread(
        lambda b, reqs: make_app(name, model_list, b, reqs, responses_status=responses_status),
        host=host, port=port, behavior=behavior,
    )


def main(argv: list[str] | None = None) -> None:
    cli(make_app, argv, prog="python -m fakes.openai_backend", what="fake OpenAI backend", port=8001, name="demo-a", models="demo,demo-mini")


if __name__ == "__main__":
    main()
