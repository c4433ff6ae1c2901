"""Chat Completions request → Anthropic Messages request (`POST /v1/messages`).

Messages: system/developer messages become the top-level `system` (a string,
or text blocks when there are several); user/assistant/tool messages become
alternating `user`/`assistant` turns (consecutive same-role turns merged, tool
results carried as `tool_result` blocks in a user turn); assistant tool calls
become `tool_use` blocks whose `input` is the parsed arguments.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.anthropic.common import (
    Conversion,
    Ledger,
    apply_policy,
    boolean,
    integer,
    number,
    require_object,
)
from router.providers.anthropic.policy import CHAT_POLICY, EXTENSIONS

DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; OpenAI does not
THINKING_BUDGET = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 16384}
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
# What POST /v1/messages/count_tokens takes (it refuses max_tokens, stream, …).
COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers")

_MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "tool_calls", "name", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}


def chat_request(body: dict, served_model: str) -> Conversion:
    """`/v1/chat/completions` body → Anthropic `/v1/messages` body."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, CHAT_POLICY, ledger, EXTENSIONS)
    _check_conditionals(body)
    system, messages = _messages(body.get("messages"), ledger)
    request: dict = {"model": served_model, "messages": messages}
    if system:
        request["system"] = system[0]["text"] if len(system) == 1 else system
    max_tokens = integer(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = integer(body, "max_tokens")
    thinking = _thinking(body.get("reasoning_effort"))
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS + (thinking["budget_tokens"] if thinking else 0)
        ledger.note(f"max_tokens: not given, {max_tokens} sent (Anthropic requires it)")
    elif thinking and max_tokens <= thinking["budget_tokens"]:
        raise UnsupportedParameter(
            f"reasoning_effort {body['reasoning_effort']!r} needs more than {thinking['budget_tokens']} "
            "max_completion_tokens on this model's provider.",
            param="max_completion_tokens",
        )
    request["max_tokens"] = max_tokens
    if thinking:
        request["thinking"] = thinking
        ledger.note("thinking text is not returned: Chat Completions has no field for it")
    stop = _stop(body.get("stop"))
    if stop:
        request["stop_sequences"] = stop
    temperature = number(body, "temperature")
    if temperature is not None:
        if not 0 <= temperature <= 1:
            raise UnsupportedParameter(
                "This model's provider takes a temperature between 0 and 1.", param="temperature"
            )
        request["temperature"] = temperature
    for key in ("top_p", "top_k"):
        value = integer(body, key) if key == "top_k" else number(body, key)
        if value is not None:
            request[key] = value
    tools = _tools(body, ledger)
    if tools:
        request["tools"] = tools
    choice = _tool_choice(body, bool(tools), ledger)
    if choice is not None:
        request["tool_choice"] = choice
    user = body.get("user")
    if user is not None:
        if not isinstance(user, str):
            raise InvalidRequest("'user' must be a string.", param="user")
        request["metadata"] = {"user_id": user}
    request["stream"] = boolean(body, "stream", False)
    return ledger.done(request)


def count_request(anthropic_body: dict | None, chat_body: dict, served_model: str) -> Conversion:
    """The body of `POST /v1/messages/count_tokens`: the client's own Anthropic
    body (the /v1/messages door) or the converted chat body, cut to the fields
    the count endpoint takes."""
    if anthropic_body is not None:
        source = anthropic_body
        conversion = Conversion(request={})
    else:
        conversion = chat_request(chat_body, served_model)
        source = conversion.request
    dropped = sorted(k for k in source if k not in COUNT_FIELDS)
    conversion.request = {k: source[k] for k in COUNT_FIELDS if k in source}
    conversion.request["model"] = served_model
    if dropped:
        conversion.notes.append(f"not sent to count_tokens: {', '.join(dropped)}")
    return conversion


def _check_conditionals(body: dict) -> None:
    n = integer(body, "n")
    if n is not None and n != 1:
        raise UnsupportedParameter("Only n=1 is supported by this model's provider.", param="n")
    if body.get("logprobs") is True:
        raise UnsupportedParameter("Log probabilities are not supported by this model's provider.", param="logprobs")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise UnsupportedParameter("Only text output is supported by this model's provider.", param="modalities")
    if body.get("logit_bias"):
        raise UnsupportedParameter("logit_bias is not supported by this model's provider.", param="logit_bias")
    rf = body.get("response_format")
    if rf is not None:
        kind = require_object(rf, "response_format").get("type")
        if kind != "text":
            raise UnsupportedParameter(
                f"response_format {kind!r} is not supported by this model's provider; "
                "ask for JSON in the prompt or use a tool.",
                param="response_format",
            )


def _thinking(effort: Any) -> dict | None:
    if effort is None or effort == "none":
        return None
    if effort not in THINKING_BUDGET:
        raise InvalidRequest(f"Unknown reasoning effort {effort!r}.", param="reasoning_effort")
    return {"type": "enabled", "budget_tokens": THINKING_BUDGET[effort]}


def _stop(stop: Any) -> list[str] | None:
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise InvalidRequest("'stop' must be a string or a list of strings.", param="stop")


# -- tools -------------------------------------------------------------------------


def _tools(body: dict, ledger: Ledger) -> list[dict]:
    raw = body.get("tools")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be a list.", param="tools")
    out = []
    for i, tool in enumerate(raw):
        param = f"tools[{i}]"
        tool = require_object(tool, param)
        if tool.get("type") != "function":
            raise UnsupportedParameter(
                f"Tools of type {tool.get('type')!r} are not supported by this model's provider.", param=param
            )
        fn = require_object(tool.get("function"), f"{param}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A function tool needs a name.", param=f"{param}.function.name")
        for key in sorted(fn.keys() - {"name", "description", "parameters"}):
            ledger.ignore(f"tools[].function.{key}", "Anthropic tools have no such field")
        schema = fn.get("parameters")
        if schema is None:
            schema = {"type": "object", "properties": {}}
        elif not isinstance(schema, dict):
            raise InvalidRequest(
                "Function parameters must be a JSON schema object.", param=f"{param}.function.parameters"
            )
        native: dict = {"name": name}
        if fn.get("description") is not None:
            native["description"] = fn["description"]
        native["input_schema"] = schema
        out.append(native)
    return out


def _tool_choice(body: dict, has_tools: bool, ledger: Ledger) -> dict | None:
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidRequest("'parallel_tool_calls' must be a boolean.", param="parallel_tool_calls")
    if not has_tools:
        if choice is not None or parallel is not None:
            ledger.note("tool_choice / parallel_tool_calls: no tools, not sent")
        return None
    native: dict
    if choice is None or choice == "auto":
        native = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        native = {"type": "any"}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A named tool_choice needs function.name.", param="tool_choice")
        native = {"type": "tool", "name": name}
    elif isinstance(choice, dict):
        raise UnsupportedParameter(
            f"tool_choice of type {choice.get('type')!r} is not supported by this model's provider.",
            param="tool_choice",
        )
    else:
        raise InvalidRequest(f"Unknown tool_choice {choice!r}.", param="tool_choice")
    if parallel is False:
        native["disable_parallel_tool_use"] = True
    elif choice is None:
        return None  # Anthropic's default is auto with parallel calls
    return native


# -- messages ----------------------------------------------------------------------


def _messages(messages: Any, ledger: Ledger) -> tuple[list[dict], list[dict]]:
    """(system text blocks, alternating turns)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list.", param="messages")
    system: list[dict] = []
    turns: list[dict] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        message = require_object(message, param)
        role = message.get("role")
        if role == "function":
            raise UnsupportedParameter("Function messages are deprecated; use tool messages.", param=f"{param}.role")
        if role not in _MESSAGE_KEYS:
            raise InvalidRequest(f"Unknown message role {role!r}.", param=f"{param}.role")
        for key in sorted(message.keys() - _MESSAGE_KEYS[role]):
            if key in ("audio", "function_call") and message[key] is not None:
                raise UnsupportedParameter(f"'{key}' in messages is not supported.", param=f"{param}.{key}")
            ledger.ignore(f"messages[].{key}", "Anthropic messages have no such field")
        if "name" in message and message.get("name") is not None:
            ledger.ignore("messages[].name", "Anthropic messages have no author name")
        content = message.get("content")
        if role in ("system", "developer"):
            if turns:
                ledger.note(f"{param}: a {role} message after the first turn joins the top-level system prompt")
            system.extend(_text_blocks(content, f"{param}.content"))
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest("A tool message needs its 'tool_call_id'.", param=f"{param}.tool_call_id")
            result: dict = {"type": "tool_result", "tool_use_id": call_id}
            if isinstance(content, str):
                if content:
                    result["content"] = content
            else:
                blocks = _text_blocks(content, f"{param}.content")
                if blocks:
                    result["content"] = blocks
            _append(turns, "user", [result])
            continue
        if role == "user":
            blocks = _user_blocks(content, f"{param}.content")
        else:
            blocks = _text_blocks(content, f"{param}.content", allow_refusal=True)
            blocks.extend(_tool_uses(message.get("tool_calls"), f"{param}.tool_calls"))
        if not blocks:
            ledger.note(f"{param}: empty {role} message not sent (Anthropic refuses empty content)")
            continue
        _append(turns, role, blocks)
    if not turns:
        raise InvalidRequest("This model's provider needs at least one user or assistant message.", param="messages")
    for turn in turns:  # a lone text block goes as a plain string
        blocks = turn["content"]
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            turn["content"] = blocks[0]["text"]
    return system, turns


def _append(turns: list[dict], role: str, blocks: list[dict]) -> None:
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": list(blocks)})


def _text_blocks(content: Any, param: str, *, allow_refusal: bool = False) -> list[dict]:
    """String or text parts → non-empty text blocks (Anthropic refuses empty ones)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest("Message content must be a string or a list of parts.", param=param)
    out = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        part = require_object(part, where)
        kind = part.get("type")
        if kind == "text" or (allow_refusal and kind == "refusal"):
            value = part.get(kind)
            if not isinstance(value, str):
                raise InvalidRequest(f"A {kind} part needs a string '{kind}'.", param=where)
            if value:
                out.append({"type": "text", "text": value})
        else:
            raise UnsupportedParameter(f"Content parts of type {kind!r} are not supported here.", param=where)
    return out


def _user_blocks(content: Any, param: str) -> list[dict]:
    if not isinstance(content, list):
        return _text_blocks(content, param)
    out = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        part = require_object(part, where)
        if part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            out.append({"type": "image", "source": image_source(url, where)})
        else:
            out.extend(_text_blocks([part], where))
    return out


def image_source(url: Any, param: str) -> dict:
    """A data: URL → a base64 source; an http(s) URL → a url source."""
    if not isinstance(url, str):
        raise InvalidRequest("The image URL must be a string.", param=param)
    if url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    if not url.startswith("data:"):
        raise InvalidRequest("An image URL must be an http(s) URL or a base64 data: URL.", param=param)
    header, sep, data = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        raise InvalidRequest("An image data: URL must be base64-encoded.", param=param)
    mime = header[: -len(";base64")].lower()
    if mime not in IMAGE_TYPES:
        raise UnsupportedParameter(
            f"Images of type {mime!r} are not supported by this model's provider (jpeg, png, gif and webp are).",
            param=param,
        )
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest("The image data: URL is not valid base64.", param=param) from exc
    return {"type": "base64", "media_type": mime, "data": data}


def _tool_uses(calls: Any, param: str) -> list[dict]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise InvalidRequest("'tool_calls' must be a list.", param=param)
    out = []
    for k, call in enumerate(calls):
        where = f"{param}[{k}]"
        call = require_object(call, where)
        if call.get("type", "function") != "function":
            raise UnsupportedParameter("Only function tool calls are supported.", param=where)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest("A tool call needs its 'id'.", param=f"{where}.id")
        fn = require_object(call.get("function"), f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A tool call needs a function name.", param=f"{where}.function.name")
        out.append(
            {
                "type": "tool_use",
                "id": call_id,
                "name": name,
                "input": _arguments(fn.get("arguments"), f"{where}.function.arguments"),
            }
        )
    return out


def _arguments(arguments: Any, param: str) -> dict:
    if arguments is None or arguments == "":
        return {}
    if not isinstance(arguments, str):
        raise InvalidRequest("Tool call arguments must be a JSON string.", param=param)
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest("Tool call arguments are not valid JSON.", param=param) from exc
    if not isinstance(value, dict):
        raise InvalidRequest("Tool call arguments must be a JSON object.", param=param)
    return value
