"""A fake Ollama server speaking Ollama's native API (not the /v1 layer).

    python -m fakes.ollama_backend --host 127.0.0.1 --port 11434 \\
        --name demo-ollama --models llama3.2,qwen3 [--quiet]

Endpoints: POST /api/chat, /api/generate (both stream NDJSON by default, as
Ollama does), /api/embed, /api/embeddings (legacy), /api/show; GET /api/tags,
/api/ps, /api/version and / ("Ollama is running").

Models are matched as Ollama does: "llama3.2" means "llama3.2:latest".  An
unknown model is 404 `{"error": "model 'x' not found"}`.  Errors use Ollama's
shape `{"error": "..."}` (also for `Behavior.status`).  Every response carries
`x-backend-name`, and the reply says "Hello from <name>.".

`options.num_predict` no larger than the reply's piece count truncates it
(`done_reason: "length"`); `format` ("json" or a JSON schema) makes the reply a
JSON text; `tools` plus a user message mentioning "weather" yields
`message.tool_calls` (arguments an object, no id); `think` adds `thinking`.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson
from aiohttp import web

from .server import (
    FAKE_KEY,
    MAX_BODY,
    Behavior,
    Faults,
    Recorded,
    ServerThread,
    StreamWriter,
    cli,
    count_tokens,
    embedding_vector,
    last_user_text,
    messages_text,
    reply_pieces,
    schema_example,
    split_text,
    thread_for,
    tool_arguments,
)

__all__ = ["OLLAMA_VERSION", "main", "make_app", "server_thread"]

OLLAMA_VERSION = "0.12.6"
JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}
NDJSON_HEADERS = {"Content-Type": "application/x-ndjson"}


def error_response(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": message}), headers=JSON_HEADERS)


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), headers=JSON_HEADERS)


_ts_cache: list[Any] = [-1, ""]


def rfc3339_nano(ns: int | None = None) -> str:
    """Go's time.RFC3339Nano in UTC (trailing zeros of the fraction trimmed)."""
    if ns is None:
        ns = time.time_ns()
    sec, frac = divmod(ns, 1_000_000_000)
    if _ts_cache[0] != sec:
        _ts_cache[0], _ts_cache[1] = (
            sec,
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)),
        )
    base = _ts_cache[1]
    f = f"{frac:09d}".rstrip("0")
    return f"{base}.{f}Z" if f else f"{base}Z"


def full_name(model: str) -> str:
    return model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"


def _family(model: str) -> str:
    base = model.split(":")[0].rsplit("/", 1)[-1].lower()
    if base.startswith("llama"):
        return "llama"
    return base.split(".")[0] or "llama"  # qwen3 -> qwen3, qwen2.5 -> qwen2


def _user_tools_trigger(tools: Any, messages: Any) -> dict[str, Any] | None:
    if not isinstance(tools, list) or not tools or "weather" not in last_user_text(messages).lower():
        return None
    fns = [
        t["function"]
        for t in tools
        if isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
    ]
    if not fns:
        return None
    for fn in fns:
        if "weather" in fn["name"].lower():
            return fn
    return fns[0]


class _OllamaFake:
    def __init__(
        self,
        name: str,
        models: list[str],
        behavior: Behavior,
        requests: list[Recorded] | None,
    ) -> None:
        self.name = name
        self.models = [full_name(m) for m in models]
        self.known = set(self.models)
        self.behavior = behavior
        self.faults = Faults(behavior, requests, error_response)
        self.modified_at = rfc3339_nano(time.time_ns() - 86_400 * 1_000_000_000)
        self.tags_body = orjson.dumps({"models": [self._model_entry(m) for m in self.models]})
        self.version_body = orjson.dumps({"version": OLLAMA_VERSION})

    # -- model catalogue ----------------------------------------------------------

    def _details(self, model: str) -> dict[str, Any]:
        fam = _family(model)
        return {
            "parent_model": "",
            "format": "gguf",
            "family": fam,
            "families": [fam],
            "parameter_size": "3.2B",
            "quantization_level": "Q4_K_M",
        }

    def _digest(self, model: str) -> str:
        return hashlib.sha256(f"{self.name}/{model}".encode()).hexdigest()

    def _model_entry(self, model: str) -> dict[str, Any]:
        return {
            "name": model,
            "model": model,
            "modified_at": self.modified_at,
            "size": 2019393189,
            "digest": self._digest(model),
            "details": self._details(model),
        }

    # -- common --------------------------------------------------------------------

    async def _begin(self, request: web.Request) -> tuple[dict[str, Any] | None, web.Response | None]:
        body, data, err = await self.faults.begin(request)
        if err is not None:
            return None, err
        if not body:
            return None, error_response(400, "missing request body")
        if not isinstance(data, dict):
            return None, error_response(400, "invalid character looking for beginning of value")
        model = data.get("model") or data.get("name")
        if not isinstance(model, str) or not model:
            return None, error_response(400, "model is required")
        if full_name(model) not in self.known:
            return None, error_response(404, f"model '{model}' not found")
        data["model"] = model
        return data, None

    def _pieces(self, options: Any, fmt: Any) -> tuple[list[str], str]:
        n = self.behavior.chunks
        if fmt == "json" or isinstance(fmt, dict):
            text = "".join(reply_pieces(self.name, 8))
            obj = schema_example(fmt, text) if isinstance(fmt, dict) else {"reply": text}
            pieces = split_text(orjson.dumps(obj).decode(), n)
        else:
            pieces = list(reply_pieces(self.name, n))
        limit = options.get("num_predict") if isinstance(options, dict) else None
        if isinstance(limit, int) and not isinstance(limit, bool) and 0 <= limit <= len(pieces):
            return pieces[:limit], "length"
        return pieces, "stop"

    @staticmethod
    def _metrics(t0: int, prompt_tokens: int, eval_count: int) -> dict[str, Any]:
        load = 1_000_000
        prompt_eval = 100_000 * prompt_tokens
        eval_d = 1_000_000 * max(eval_count, 1)
        return {
            "total_duration": load + prompt_eval + eval_d + (time.perf_counter_ns() - t0),
            "load_duration": load,
            "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": prompt_eval,
            "eval_count": eval_count,
            "eval_duration": eval_d,
        }

    async def _stream(self, request: web.Request) -> StreamWriter:
        w = StreamWriter(web.StreamResponse(headers=NDJSON_HEADERS), request, self.behavior)
        await w.start()
        return w

    # -- GET ---------------------------------------------------------------------------

    async def root(self, request: web.Request) -> web.Response:
        return web.Response(text="Ollama is running")

    async def version(self, request: web.Request) -> web.Response:
        return web.Response(body=self.version_body, headers=JSON_HEADERS)

    async def tags(self, request: web.Request) -> web.Response:
        return web.Response(body=self.tags_body, headers=JSON_HEADERS)

    async def ps(self, request: web.Request) -> web.Response:
        expires = rfc3339_nano(time.time_ns() + 300 * 1_000_000_000)
        models = []
        for m in self.models:
            entry = self._model_entry(m)
            del entry["modified_at"]
            entry.update(expires_at=expires, size_vram=entry["size"], context_length=4096)
            models.append(entry)
        return _json({"models": models})

    # -- POST ---------------------------------------------------------------------------

    async def show(self, request: web.Request) -> web.Response:
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        model = full_name(data["model"])
        fam = _family(model)
        return _json(
            {
                "license": "",
                "modelfile": f'# Modelfile generated by "ollama show"\nFROM {model}\nTEMPLATE """{{{{ .Prompt }}}}"""\n',
                "parameters": 'stop                           "<|eot_id|>"',
                "template": "{{ .Prompt }}",
                "details": self._details(model),
                "model_info": {
                    "general.architecture": fam,
                    "general.basename": model.split(":")[0],
                    "general.parameter_count": 3212749888,
                    f"{fam}.context_length": 131072,
                    f"{fam}.embedding_length": 3072,
                },
                "capabilities": ["completion", "tools"],
                "modified_at": self.modified_at,
            }
        )

    async def chat(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter_ns()
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        model = data["model"]
        messages = data.get("messages")
        if not messages:  # Ollama just loads the model
            return _json(
                {
                    "model": model,
                    "created_at": rfc3339_nano(),
                    "message": {"role": "assistant", "content": ""},
                    "done_reason": "load",
                    "done": True,
                }
            )
        if not isinstance(messages, list):
            return error_response(400, "json: cannot unmarshal messages")
        prompt_tokens = count_tokens(*messages_text(messages))
        tool = _user_tools_trigger(data.get("tools"), messages)
        think = data.get("think")
        thinking = f"The user wants a reply from {self.name}." if think and think != "false" else None
        if tool is not None:
            calls = [
                {
                    "function": {
                        "name": tool["name"],
                        "arguments": tool_arguments(tool.get("parameters")),
                    }
                }
            ]
            pieces: list[str] = []
            reason = "stop"
            eval_count = count_tokens(orjson.dumps(calls).decode())
        else:
            calls = None
            pieces, reason = self._pieces(data.get("options"), data.get("format"))
            eval_count = len(pieces)

        stream = data.get("stream")
        if stream is None or stream:
            w = await self._stream(request)
            if thinking:
                await w.send(
                    self._chat_frame(
                        model,
                        {"role": "assistant", "content": "", "thinking": thinking},
                    )
                )
            if calls:
                await w.send(self._chat_frame(model, {"role": "assistant", "content": "", "tool_calls": calls}))
            for piece in pieces:
                await w.send(self._chat_frame(model, {"role": "assistant", "content": piece}))
            final = {
                "model": model,
                "created_at": rfc3339_nano(),
                "message": {"role": "assistant", "content": ""},
                "done_reason": reason,
                "done": True,
                **self._metrics(t0, prompt_tokens, eval_count),
            }
            await w.send(orjson.dumps(final) + b"\n")
            return await w.finish()

        message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        return _json(
            {
                "model": model,
                "created_at": rfc3339_nano(),
                "message": message,
                "done_reason": reason,
                "done": True,
                **self._metrics(t0, prompt_tokens, eval_count),
            }
        )

    @staticmethod
    def _chat_frame(model: str, message: dict[str, Any]) -> bytes:
        return (
            orjson.dumps(
                {
                    "model": model,
                    "created_at": rfc3339_nano(),
                    "message": message,
                    "done": False,
                }
            )
            + b"\n"
        )

    async def generate(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter_ns()
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        model = data["model"]
        prompt = data.get("prompt")
        if not prompt and not data.get("images"):  # Ollama just loads the model
            return _json(
                {
                    "model": model,
                    "created_at": rfc3339_nano(),
                    "response": "",
                    "done": True,
                    "done_reason": "load",
                }
            )
        prompt_tokens = count_tokens(data.get("system"), prompt)
        pieces, reason = self._pieces(data.get("options"), data.get("format"))
        think = data.get("think")
        thinking = f"The user wants a reply from {self.name}." if think and think != "false" else None
        context = list(range(1, prompt_tokens + len(pieces) + 1))

        stream = data.get("stream")
        if stream is None or stream:
            w = await self._stream(request)
            if thinking:
                await w.send(self._gen_frame(model, "", thinking))
            for piece in pieces:
                await w.send(self._gen_frame(model, piece))
            final = {
                "model": model,
                "created_at": rfc3339_nano(),
                "response": "",
                "done": True,
                "done_reason": reason,
                "context": context,
                **self._metrics(t0, prompt_tokens, len(pieces)),
            }
            await w.send(orjson.dumps(final) + b"\n")
            return await w.finish()

        out: dict[str, Any] = {
            "model": model,
            "created_at": rfc3339_nano(),
            "response": "".join(pieces),
        }
        if thinking:
            out["thinking"] = thinking
        out.update(
            done=True,
            done_reason=reason,
            context=context,
            **self._metrics(t0, prompt_tokens, len(pieces)),
        )
        return _json(out)

    @staticmethod
    def _gen_frame(model: str, text: str, thinking: str | None = None) -> bytes:
        obj: dict[str, Any] = {
            "model": model,
            "created_at": rfc3339_nano(),
            "response": text,
        }
        if thinking:
            obj["thinking"] = thinking
        obj["done"] = False
        return orjson.dumps(obj) + b"\n"

    async def embed(self, request: web.Request) -> web.Response:
        t0 = time.perf_counter_ns()
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        inp = data.get("input")
        if inp is None or inp == "":
            items: list[Any] = []
        elif isinstance(inp, str):
            items = [inp]
        elif isinstance(inp, list) and all(isinstance(x, str) for x in inp):
            items = inp
        else:
            return error_response(400, "invalid input type")
        dims = data.get("dimensions")
        if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
            dims = 8
        tokens = sum(count_tokens(x) for x in items)
        return _json(
            {
                "model": data["model"],
                "embeddings": [embedding_vector(x, dims) for x in items],
                "total_duration": 1_000_000 + (time.perf_counter_ns() - t0),
                "load_duration": 1_000_000,
                "prompt_eval_count": tokens,
            }
        )

    async def embeddings_legacy(self, request: web.Request) -> web.Response:
        data, err = await self._begin(request)
        if err is not None:
            return err
        assert data is not None
        prompt = data.get("prompt")
        return _json({"embedding": embedding_vector(prompt, 8) if prompt else []})


def make_app(
    name: str,
    models: list[str],
    behavior: Behavior | None = None,
    requests: list[Recorded] | None = None,
) -> web.Application:
    """The fake Ollama server.  `requests=None` records nothing."""
    fake = _OllamaFake(name, models, behavior if behavior is not None else Behavior(), requests)
    app = web.Application(client_max_size=MAX_BODY, middlewares=fake.faults.middlewares)

    async def add_name(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-backend-name"] = name

    app.on_response_prepare.append(add_name)
    app[FAKE_KEY] = fake
    r = app.router
    r.add_get("/", fake.root)  # add_get also answers HEAD
    r.add_get("/api/version", fake.version)
    r.add_get("/api/tags", fake.tags)
    r.add_get("/api/ps", fake.ps)
    r.add_post("/api/show", fake.show)
    r.add_post("/api/chat", fake.chat)
    r.add_post("/api/generate", fake.generate)
    r.add_post("/api/embed", fake.embed)
    r.add_post("/api/embeddings", fake.embeddings_legacy)
    return app


def server_thread(
    name: str = "demo-ollama",
    models: list[str] | tuple[str, ...] = ("llama3.2",),
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    behavior: Behavior | None = None,
) -> ServerThread:
    """A (not yet started) `ServerThread` serving this fake; use `with` or `.start()`."""
    return thread_for(make_app, name, models, port=port, host=host, behavior=behavior)


def main(argv: list[str] | None = None) -> None:
    cli(make_app, argv, prog="python -m fakes.ollama_backend", what="fake Ollama backend", port=11434, name="demo-ollama", models="llama3.2,qwen3")


if __name__ == "__main__":
    main()
