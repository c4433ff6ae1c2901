"""A fake Anthropic Messages API speaking the documented wire format.

    python -m fakes.anthropic_backend --host 127.0.0.1 --port 8003 \\
        --name demo-claude --models claude-sonnet-4-5,claude-haiku-4-5 [--quiet]

Endpoints: POST /v1/messages (a message, or with `stream: true` the SSE
event sequence message_start, content_block_start, ping,
content_block_delta…, content_block_stop, message_delta, message_stop),
POST /v1/messages/count_tokens, GET /v1/models. Every request needs
`x-api-key` (the configured key when one is given) and `anthropic-version`;
the body is checked as the real API checks it (unknown fields, missing
max_tokens, roles, empty content, tool_use/tool_result pairing, temperature
range) and refused with Anthropic's error object
(`{"type": "error", "error": {"type", "message"}, "request_id"}`).

The reply says "Hello from <name>. This is a demo reply." in
`Behavior.chunks` pieces; `max_tokens` below the piece count truncates it
(`stop_reason: max_tokens`), a stop sequence that occurs in it cuts it
(`stop_sequence`). Tool use: when `tools` are given and the last user turn
(not a tool result) mentions "weather", or `tool_choice` is any/tool, the reply
is one `tool_use` block. `thinking` adds a thinking block first (streamed
as several `thinking_delta`s, then its `signature_delta`). A last user
text containing "overload-mid-stream" streams one text delta and then an
`error` event (overloaded_error).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

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
    reply_pieces,
    split_text,
    tool_arguments,
)

__all__ = ["main", "make_app", "server_thread"]

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
JSON_HEADERS = {"Content-Type": JSON_CT}

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
MESSAGE_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
    }
)
COUNT_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"})
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_ids = IdGen()


class Invalid(Exception):
    """A request the real API refuses: (status, message)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_body(status: int, message: str) -> bytes:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}, "request_id": _ids("req_")})


def error_response(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=error_body(status, message), headers=JSON_HEADERS)


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), headers=JSON_HEADERS)


def sse(event: dict) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


# -- validation ------------------------------------------------------------------------


def _check_text(block: dict, where: str) -> None:
    if not isinstance(block.get("text"), str):
        raise Invalid(f"{where}.text: Field required")
    if not block["text"]:
        raise Invalid("messages: text content blocks must be non-empty")


def _check_blocks(content: Any, role: str, where: str) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise Invalid(f"{where}.content: Input should be a valid list")
    for j, block in enumerate(content):
        at = f"{where}.content.{j}"
        if not isinstance(block, dict):
            raise Invalid(f"{at}: Input should be a valid dictionary")
        kind = block.get("type")
        if kind == "text":
            _check_text(block, at)
        elif kind == "image":
            source = block.get("source")
            if not isinstance(source, dict):
                raise Invalid(f"{at}.source: Field required")
            if source.get("type") == "base64":
                if source.get("media_type") not in IMAGE_TYPES or not isinstance(source.get("data"), str):
                    raise Invalid(
                        f"{at}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
                        "'image/gif' or 'image/webp'"
                    )
            elif source.get("type") == "url":
                if not isinstance(source.get("url"), str):
                    raise Invalid(f"{at}.source.url.url: Field required")
            else:
                raise Invalid(
                    f"{at}.source: Input tag {source.get('type')!r} found using 'type' does not match "
                    "any of the expected tags: 'base64', 'file', 'text', 'url'"
                )
        elif kind == "tool_use":
            if role != "assistant":
                raise Invalid(f"{where}: tool_use blocks can only be in assistant messages")
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise Invalid(f"{at}: tool_use blocks need an id and a name")
            if not isinstance(block.get("input"), dict):
                raise Invalid(f"{at}.input: Input should be a valid dictionary")
        elif kind == "tool_result":
            if role != "user":
                raise Invalid(f"{where}: tool_result blocks can only be in user messages")
            if not isinstance(block.get("tool_use_id"), str):
                raise Invalid(f"{at}.tool_use_id: Field required")
            inner = block.get("content")
            if inner is not None and not isinstance(inner, str):
                if not isinstance(inner, list):
                    raise Invalid(f"{at}.content: Input should be a valid list")
                for k, part in enumerate(inner):
                    if not isinstance(part, dict) or part.get("type") not in ("text", "image"):
                        raise Invalid(f"{at}.content.{k}: Input tag does not match any of the expected tags")
                    if part["type"] == "text":
                        _check_text(part, f"{at}.content.{k}")
        elif kind in ("thinking", "redacted_thinking"):
            if role != "assistant":
                raise Invalid(f"{where}: thinking blocks can only be in assistant messages")
        else:
            raise Invalid(f"{at}: Input tag {kind!r} found using 'type' does not match any of the expected tags")
    return content


def check_messages(messages: Any) -> list[list[dict]]:
    """The blocks of each message, or Invalid as the real API words it."""
    if not isinstance(messages, list):
        raise Invalid("messages: Field required" if messages is None else "messages: Input should be a valid list")
    if not messages:
        raise Invalid("messages: at least one message is required")
    out: list[list[dict]] = []
    pending: set[str] = set()  # tool_use ids of the previous assistant turn, still to be answered
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise Invalid(f"{where}: Input should be a valid dictionary")
        for key in message:
            if key not in ("role", "content"):
                raise Invalid(f"{where}.{key}: Extra inputs are not permitted")
        role = message.get("role")
        if role == "system":
            raise Invalid(
                f'{where}: Unexpected role "system". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            raise Invalid(f"{where}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        if content == "" or content == [] or content is None:
            if not (i == len(messages) - 1 and role == "assistant"):
                raise Invalid(
                    f"{where}: all messages must have non-empty content except for the optional final assistant message"
                )
        blocks = _check_blocks(content or [], role, where)
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if pending:
            if role != "user" or not pending <= set(results):
                raise Invalid(
                    f"{where}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(sorted(pending - set(results)))}. Each `tool_use` block must "
                    "have a corresponding `tool_result` block in the next message."
                )
        stray = set(results) - pending
        if stray:
            raise Invalid(
                f"{where}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(sorted(stray))}. Each `tool_result` block must have a corresponding "
                "`tool_use` block in the previous message."
            )
        if results and any(b.get("type") != "tool_result" for b in blocks[: len(results)]):
            raise Invalid(f"{where}: tool_result blocks must come first in the message content")
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        out.append(blocks)
    if pending:
        raise Invalid("messages: the conversation ends with `tool_use` blocks that have no `tool_result`")
    return out


def _check_system(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        for j, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise Invalid(f"system.{j}: Input should be a text block")
            _check_text(block, f"system.{j}")
        return " ".join(b["text"] for b in system)
    raise Invalid("system: Input should be a valid string or list")


def _check_tools(tools: Any, choice: Any) -> list[dict]:
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise Invalid("tools: Input should be a valid list")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise Invalid(f"tools.{i}.name: Field required")
        for key in tool:
            if key not in ("name", "description", "input_schema", "type", "cache_control"):
                raise Invalid(f"tools.{i}.custom.{key}: Extra inputs are not permitted")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Invalid(f"tools.{i}.custom.input_schema.type: Input should be 'object'")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            raise Invalid(
                "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
            )
        if choice["type"] == "tool" and choice.get("name") not in {t["name"] for t in tools}:
            raise Invalid("tool_choice.tool.name: the named tool is not in tools")
        if choice["type"] == "none" and "disable_parallel_tool_use" in choice:
            raise Invalid("tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted")
    return tools


def check_message_request(data: Any, known: set[str]) -> dict:
    if not isinstance(data, dict):
        raise Invalid("body: Input should be a valid dictionary")
    for key in data:
        if key not in MESSAGE_FIELDS:
            raise Invalid(f"{key}: Extra inputs are not permitted")
    model = data.get("model")
    if not isinstance(model, str):
        raise Invalid("model: Field required")
    if model not in known:
        raise Invalid(f"model: {model}", status=404)
    max_tokens = data.get("max_tokens")
    if max_tokens is None:
        raise Invalid("max_tokens: Field required")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise Invalid("max_tokens: Input should be a valid integer greater than or equal to 1")
    temperature = data.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 1
    ):
        raise Invalid("temperature: Input should be less than or equal to 1")
    stop = data.get("stop_sequences")
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise Invalid("stop_sequences: Input should be a valid list of strings")
    if data.get("stream") is not None and not isinstance(data["stream"], bool):
        raise Invalid("stream: Input should be a valid boolean")
    metadata = data.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or set(metadata) - {"user_id"}):
        raise Invalid("metadata: only user_id is permitted")
    thinking = data.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
            raise Invalid("thinking: Input tag does not match any of the expected tags: 'disabled', 'enabled'")
        budget = thinking.get("budget_tokens")
        if thinking["type"] == "enabled" and (not isinstance(budget, int) or budget < 1024 or budget >= max_tokens):
            raise Invalid("thinking.enabled.budget_tokens: must be at least 1024 and less than max_tokens")
    check_messages(data.get("messages"))
    _check_system(data.get("system"))
    _check_tools(data.get("tools"), data.get("tool_choice"))
    return data


# -- the fake ---------------------------------------------------------------------------


def _block_text(blocks: list[dict]) -> str:
    parts = []
    for b in blocks:
        if b.get("type") == "text":
            parts.append(b["text"])
        elif b.get("type") == "tool_result":
            inner = b.get("content")
            parts.append(inner if isinstance(inner, str) else " ".join(p.get("text", "") for p in inner or ()))
    return " ".join(parts)


def _pick_tool(data: dict) -> dict | None:
    tools = data.get("tools") or []
    choice = data.get("tool_choice") or {"type": "auto"}
    if not tools or choice.get("type") == "none":
        return None
    if choice.get("type") == "tool":
        return next(t for t in tools if t["name"] == choice["name"])
    last = data["messages"][-1]
    content = last.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    answered = any(b.get("type") == "tool_result" for b in blocks)
    if choice.get("type") == "any" or (
        last["role"] == "user" and not answered and "weather" in _block_text(blocks).lower()
    ):
        return next((t for t in tools if "weather" in t["name"].lower()), tools[0])
    return None


class _AnthropicFake:
    def __init__(
        self, name: str, models: list[str], behavior: Behavior, requests: list[Recorded] | None, api_key: str | None
    ) -> None:
        self.name = name
        self.models = list(models)
        self.known = set(self.models)
        self.behavior = behavior
        self.api_key = api_key
        self.faults = Faults(behavior, requests, self._injected)

    @staticmethod
    def _injected(status: int, message: str) -> web.Response:
        return error_response(status, message)

    def _auth(self, request: web.Request) -> web.Response | None:
        key = request.headers.get("x-api-key")
        if not key:
            return error_response(401, "x-api-key header is required")
        if self.api_key is not None and key != self.api_key:
            return error_response(401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return error_response(400, "anthropic-version: header is required")
        return None

    async def _begin(self, request: web.Request) -> tuple[Any, web.Response | None]:
        _body, data, err = await self.faults.begin(request)
        if err is not None:
            return None, err
        denied = self._auth(request)
        if denied is not None:
            return None, denied
        if data is None:
            return None, error_response(400, "There was an issue with your request: the body is not valid JSON")
        return data, None

    async def models_list(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied is not None:
            return denied
        data = [
            {"type": "model", "id": m, "display_name": m, "created_at": "2025-09-29T00:00:00Z"} for m in self.models
        ]
        return _json(
            {
                "data": data,
                "has_more": False,
                "first_id": self.models[0] if self.models else None,
                "last_id": self.models[-1] if self.models else None,
            }
        )

    async def count(self, request: web.Request) -> web.Response:
        data, err = await self._begin(request)
        if err is not None:
            return err
        try:
            if not isinstance(data, dict):
                raise Invalid("body: Input should be a valid dictionary")
            for key in data:
                if key not in COUNT_FIELDS:
                    raise Invalid(f"{key}: Extra inputs are not permitted")
            if data.get("model") not in self.known:
                raise Invalid(f"model: {data.get('model')}", status=404)
            blocks = check_messages(data.get("messages"))
            system = _check_system(data.get("system"))
            _check_tools(data.get("tools"), data.get("tool_choice"))
        except Invalid as exc:
            return error_response(exc.status, exc.message)
        return _json({"input_tokens": self._input_tokens(system, blocks, data.get("tools"))})

    @staticmethod
    def _input_tokens(system: str, blocks: list[list[dict]], tools: Any) -> int:
        return count_tokens(system, *(_block_text(b) for b in blocks), orjson.dumps(tools).decode() if tools else "")

    def _reply(self, data: dict) -> tuple[list[str], str, str | None]:
        """(text pieces, stop_reason, stop_sequence)."""
        pieces = list(reply_pieces(self.name, self.behavior.chunks))
        for stop in data.get("stop_sequences") or ():
            text = "".join(pieces)
            at = text.find(stop) if stop else -1
            if at >= 0:
                return split_text(text[:at], min(len(pieces), max(at, 1))) if at else [], "stop_sequence", stop
        if data["max_tokens"] < len(pieces):
            return pieces[: data["max_tokens"]], "max_tokens", None
        return pieces, "end_turn", None

    async def messages(self, request: web.Request) -> web.StreamResponse:
        data, err = await self._begin(request)
        if err is not None:
            return err
        try:
            check_message_request(data, self.known)
        except Invalid as exc:
            return error_response(exc.status, exc.message)
        blocks = check_messages(data["messages"])
        input_tokens = self._input_tokens(_check_system(data.get("system")), blocks, data.get("tools"))
        tool = _pick_tool(data)
        thinking = data.get("thinking") or {}
        thought = f"The user wants a reply from {self.name}." if thinking.get("type") == "enabled" else None
        overload = "overload-mid-stream" in _block_text(blocks[-1])
        content: list[dict] = []
        if thought:
            content.append({"type": "thinking", "thinking": thought, "signature": "c2lnbmF0dXJl"})
        if tool is not None:
            pieces: list[str] = []
            args = tool_arguments(tool.get("input_schema"))
            content.append({"type": "tool_use", "id": _ids("toolu_"), "name": tool["name"], "input": args})
            reason, stop_seq = "tool_use", None
            output_tokens = count_tokens(orjson.dumps(args).decode())
        else:
            pieces, reason, stop_seq = self._reply(data)
            content.append({"type": "text", "text": "".join(pieces)})
            output_tokens = max(len(pieces), 1)
        usage = {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }
        message = {
            "id": _ids("msg_"),
            "type": "message",
            "role": "assistant",
            "model": data["model"],
            "content": content,
            "stop_reason": reason,
            "stop_sequence": stop_seq,
            "usage": usage,
        }
        if not data.get("stream"):
            return _json(message)
        w = StreamWriter(web.StreamResponse(headers=SSE_HEADERS), request, self.behavior)
        await w.start()
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        await w.send(sse({"type": "message_start", "message": start}))
        for index, block in enumerate(content):
            await w.send(sse({"type": "content_block_start", "index": index, "content_block": _opening(block)}))
            if index == 0:
                await w.send(sse({"type": "ping"}))
            for delta in _deltas(block, pieces):
                await w.send(sse({"type": "content_block_delta", "index": index, "delta": delta}))
                if overload:
                    await w.send(sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
                    return await w.finish()
            await w.send(sse({"type": "content_block_stop", "index": index}))
        await w.send(
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": stop_seq},
                    "usage": {
                        "input_tokens": input_tokens,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "output_tokens": output_tokens,
                    },
                }
            )
        )
        await w.send(sse({"type": "message_stop"}))
        return await w.finish()


def _opening(block: dict) -> dict:
    """A block as content_block_start carries it: empty, filled by deltas."""
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    if block["type"] == "tool_use":
        return {**block, "input": {}}
    return {"type": "thinking", "thinking": "", "signature": ""}


def _deltas(block: dict, pieces: list[str]) -> list[dict]:
    if block["type"] == "text":
        return [{"type": "text_delta", "text": piece} for piece in pieces]
    if block["type"] == "tool_use":
        parts = split_text(orjson.dumps(block["input"]).decode(), 3)
        return [{"type": "input_json_delta", "partial_json": part} for part in parts]
    # Anthropic streams a thinking block as many thinking_delta events and
    # one signature_delta just before its content_block_stop.
    return [
        *({"type": "thinking_delta", "thinking": part} for part in split_text(block["thinking"], 3)),
        {"type": "signature_delta", "signature": block["signature"]},
    ]


def make_app(
    name: str,
    models: list[str],
    behavior: Behavior | None = None,
    requests: list[Recorded] | None = None,
    *,
    api_key: str | None = None,
) -> web.Application:
    """The fake Anthropic API. `requests=None` records nothing; `api_key` None
    accepts any non-empty x-api-key."""
    fake = _AnthropicFake(name, models, behavior if behavior is not None else Behavior(), requests, api_key)
    app = web.Application(client_max_size=MAX_BODY, middlewares=fake.faults.middlewares)

    async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-backend-name"] = name
        response.headers.setdefault("request-id", _ids("req_"))

    app.on_response_prepare.append(add_headers)
    app[FAKE_KEY] = fake
    app.router.add_get("/v1/models", fake.models_list)
    app.router.add_post("/v1/messages", fake.messages)
    app.router.add_post("/v1/messages/count_tokens", fake.count)
    return app


def server_thread(
    name: str = "demo-claude",
    models: list[str] | tuple[str, ...] = ("claude-sonnet-4-5",),
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    behavior: Behavior | None = None,
    api_key: str | None = None,
) -> ServerThread:
    """A (not yet started) `ServerThread` serving this fake; use `with` or `.start()`."""
    model_list = list(models)
    return ServerThread(
        lambda b, reqs: make_app(name, model_list, b, reqs, api_key=api_key), host=host, port=port, behavior=behavior
    )


def main(argv: list[str] | None = None) -> None:
    cli(
        make_app,
        argv,
        prog="python -m fakes.anthropic_backend",
        what="fake Anthropic backend",
        port=8003,
        name="demo-claude",
        models="claude-sonnet-4-5,claude-haiku-4-5",
    )


if __name__ == "__main__":
    main()
