"""Anthropic Messages request → OpenAI Chat Completions request.

Invariants:
- Pure: no Django, no I/O. Every rejection is an `InvalidRequest` (400) that
  names the offending path in `param`; the view renders it Anthropic-shaped.
- Only fields with an OpenAI meaning are sent upstream; every other field is
  dropped and named in `Conversion.ignored` (never silently forwarded: an
  OpenAI backend would reject or misread Anthropic-only fields).
- `system` and `messages` are converted by `anthropic_content`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.core.errors import InvalidRequest, MissingModel
from router.frontends.anthropic_content import CACHE_NOTE, THINKING_NOTE, conversation, system_messages
from router.request import loads_object

# Anthropic fields with no OpenAI equivalent: dropped, named in `ignored`.
IGNORED_FIELDS: dict[str, str] = {
    "thinking": THINKING_NOTE,
    "cache_control": CACHE_NOTE,
    "service_tier": "no service tiers",
    "container": "no code-execution containers",
    "mcp_servers": "no MCP connector",
    "context_management": "no server-side context editing",
    "inference_geo": "no inference regions",
    "speed": "no speed tiers",
    "diagnostics": "no prompt-cache diagnostics",
}
_HANDLED = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "metadata",
        "output_config",
    }
)


@dataclass(frozen=True, slots=True)
class Conversion:
    request: dict[str, Any]  # the OpenAI Chat Completions body
    model: str
    stream: bool
    stop_sequences: tuple[str, ...]
    ignored: tuple[str, ...]  # "field: why", for the log


def parse(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, each top-level key once (400 otherwise)."""
    return loads_object(raw)


def to_openai(body: dict[str, Any]) -> Conversion:
    """A parsed Anthropic `/v1/messages` body → the equivalent Chat Completions body."""
    ignored: list[str] = []
    model = body.get("model")
    if model is None or model == "":
        raise MissingModel("model: Field required", param="model")
    if not isinstance(model, str):
        raise InvalidRequest("model: must be a string.", param="model")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidRequest("max_tokens: must be a positive integer.", param="max_tokens")
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest("stream: must be a boolean.", param="stream")

    messages = system_messages(body.get("system"))
    messages.extend(conversation(body.get("messages"), ignored))
    request: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    tools = _tools(body.get("tools"), ignored)
    if tools:
        request["tools"] = tools
    request.update(_tool_choice(body.get("tool_choice"), bool(tools)))
    stops = body.get("stop_sequences")
    if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)):
        raise InvalidRequest("stop_sequences: must be a list of strings.", param="stop_sequences")
    if stops:
        request["stop"] = list(stops)
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidRequest(f"{key}: must be a number.", param=key)
            request[key] = value
    top_k = body.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise InvalidRequest("top_k: must be an integer.", param="top_k")
        request["top_k"] = top_k  # an extension field vLLM, SGLang and the Ollama path honour
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise InvalidRequest("metadata: must be an object.", param="metadata")
        user = metadata.get("user_id")
        if isinstance(user, str) and user:
            request["user"] = user
    request.update(_output_config(body.get("output_config"), ignored))
    request["stream"] = stream
    if stream:
        request["stream_options"] = {"include_usage": True}  # usage for message_delta
    for key in body.keys() - _HANDLED:
        if body[key] is not None:
            ignored.append(f"{key}: {IGNORED_FIELDS.get(key, 'unknown field')}")
    return Conversion(
        request=request,
        model=model,
        stream=stream,
        stop_sequences=tuple(stops or ()),
        ignored=tuple(sorted(set(ignored))),
    )


def _tools(tools: Any, ignored: list[str]) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidRequest("tools: must be a list.", param="tools")
    out = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"{param}: must be an object.", param=param)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise InvalidRequest(
                f"{param}.type: Anthropic server tools ({kind!r}) are not supported; "
                "declare a custom tool with 'name' and 'input_schema'.",
                param=f"{param}.type",
            )
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"{param}.name: must be a non-empty string.", param=f"{param}.name")
        if not isinstance(schema, dict):
            raise InvalidRequest(f"{param}.input_schema: must be an object.", param=f"{param}.input_schema")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        for key in sorted(tool.keys() - {"type", "name", "input_schema", "description", "strict"}):
            ignored.append(f"tools[].{key}: no OpenAI equivalent")
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any, has_tools: bool) -> dict[str, Any]:
    if choice is None:
        return {}
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        raise InvalidRequest("tool_choice: must be an object with a 'type'.", param="tool_choice")
    kind = choice["type"]
    if kind == "auto":
        value: Any = "auto"
    elif kind == "any":
        value = "required"
    elif kind == "none":
        value = "none"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("tool_choice.name: must be a string.", param="tool_choice.name")
        value = {"type": "function", "function": {"name": name}}
    else:
        raise InvalidRequest(f"tool_choice.type: unknown value {kind!r}.", param="tool_choice.type")
    if not has_tools:
        if kind in ("any", "tool"):
            raise InvalidRequest("tool_choice: requires 'tools'.", param="tool_choice")
        return {}  # auto/none without tools: OpenAI backends reject a bare tool_choice
    out: dict[str, Any] = {"tool_choice": value}
    if choice.get("disable_parallel_tool_use") is True and kind != "none":
        out["parallel_tool_calls"] = False
    return out


def _output_config(config: Any, ignored: list[str]) -> dict[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise InvalidRequest("output_config: must be an object.", param="output_config")
    if config.get("effort") is not None:
        ignored.append("output_config.effort: no portable OpenAI equivalent")
    fmt = config.get("format")
    if fmt is None:
        return {}
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise InvalidRequest(
            "output_config.format: must be {'type': 'json_schema', 'schema': {...}}.", param="output_config.format"
        )
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}}
