"""Chat Completions ↔ Ollama `/api/chat`: the request and the non-streamed answer.

Invariants: see `common`. The chat answer never carries Ollama's
`thinking` text (Chat Completions has no standard field for it).
"""

from __future__ import annotations

from typing import Any

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.normalized import chat_completion_object, part_text
from router.providers.ollama.common import (
    Conversion,
    Ledger,
    apply_policy,
    arguments_object,
    boolean,
    choose_tools,
    finish_reason,
    function_tools,
    image_data,
    integer,
    json_format,
    message_of,
    ollama_tool,
    raise_if_error,
    require_object,
    sampling_options,
    stop_option,
    think_value,
    token_counts,
    tool_calls,
)
from router.providers.ollama.policy import CHAT_POLICY

_OPTION_KEYS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
}
_MESSAGE_KEYS = {
    "system": {"role", "content"},
    "developer": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls"},
    "tool": {"role", "content", "tool_call_id"},
}


def chat_request(body: dict, served_model: str) -> Conversion:
    """`/v1/chat/completions` body → Ollama `/api/chat` body."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, CHAT_POLICY, ledger)
    _check_conditionals(body)

    request: dict = {
        "model": served_model,
        "messages": _messages(body.get("messages"), ledger),
        "stream": boolean(body, "stream", False),
    }
    tools = _tools(body, ledger)
    if tools:
        request["tools"] = tools
    rf = body.get("response_format")
    if rf is not None:
        rf = require_object(rf, "response_format")
        schema = None
        if rf.get("type") == "json_schema" and rf.get("json_schema") is not None:
            spec = require_object(rf["json_schema"], "response_format.json_schema")
            schema = spec.get("schema")
        fmt = json_format(rf.get("type"), schema, "response_format")
        if fmt is not None:
            request["format"] = fmt
    options = sampling_options(body, _OPTION_KEYS)
    stop = stop_option(body)
    if stop is not None:
        options["stop"] = stop
    max_tokens = integer(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = integer(body, "max_tokens")
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    if options:
        request["options"] = options
    think = think_value(body, body.get("reasoning_effort"), "reasoning_effort")
    if think is not None:
        request["think"] = think
        if think:
            ledger.note("reasoning text is not returned: Chat Completions has no field for it")
    return ledger.done(request)


def _check_conditionals(body: dict) -> None:
    n = integer(body, "n")
    if n is not None and n != 1:
        raise UnsupportedParameter("Only n=1 is supported by this model's provider.", param="n")
    if body.get("logprobs") is True:
        raise UnsupportedParameter(
            "Log probabilities are not supported by this model's provider.",
            param="logprobs",
        )
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise UnsupportedParameter(
            "Only text output is supported by this model's provider.",
            param="modalities",
        )
    if body.get("logit_bias"):
        raise UnsupportedParameter("logit_bias is not supported by this model's provider.", param="logit_bias")


def _tools(body: dict, ledger: Ledger) -> list[dict]:
    tools = []
    for param, tool in function_tools(body):
        fn = require_object(tool.get("function"), f"{param}.function")
        for key in sorted(fn.keys() - {"name", "description", "parameters"}):
            ledger.ignore(f"tools[].function.{key}", "Ollama has no equivalent")
        tools.append(ollama_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), param))
    choice = body.get("tool_choice")
    allowed = None
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        spec = choice.get("allowed_tools") or {}
        names = [(t.get("function") or {}).get("name") for t in spec.get("tools") or () if isinstance(t, dict)]
        allowed = (spec.get("mode"), names)
    elif choice is not None and not isinstance(choice, str | dict):
        raise InvalidRequest("'tool_choice' must be a string or an object.", param="tool_choice")
    return choose_tools(tools, choice, allowed, ledger)


def _messages(messages: Any, ledger: Ledger) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list.", param="messages")
    out: list[dict] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        message = require_object(message, param)
        role = message.get("role")
        if role == "function":
            raise UnsupportedParameter(
                "Function messages are deprecated; use tool messages.",
                param=f"{param}.role",
            )
        if role not in _MESSAGE_KEYS:
            raise InvalidRequest(f"Unknown message role {role!r}.", param=f"{param}.role")
        for key in sorted(message.keys() - _MESSAGE_KEYS[role]):
            if key in ("audio", "function_call") and message[key] is not None:
                raise UnsupportedParameter(f"'{key}' in messages is not supported.", param=f"{param}.{key}")
            ledger.ignore(f"messages[].{key}", "Ollama messages have no such field")
        text, images = _content(message.get("content"), f"{param}.content")
        native: dict = {
            "role": "system" if role == "developer" else role,
            "content": text,
        }
        if images:
            native["images"] = images
        if role == "assistant" and message.get("tool_calls"):
            native["tool_calls"] = _history_calls(message["tool_calls"], call_names, f"{param}.tool_calls")
        if role == "tool":
            call_id = message.get("tool_call_id")
            name = call_names.get(call_id) if isinstance(call_id, str) else None
            if name:
                native["tool_name"] = name
            else:
                ledger.note(f"{param}: tool_call_id matches no earlier call; tool_name not sent")
        out.append(native)
    return out


def _content(content: Any, param: str) -> tuple[str, list[str]]:
    """String or parts → (text, images); text parts are joined with newlines."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        raise InvalidRequest("Message content must be a string or a list of parts.", param=param)
    texts: list[str] = []
    images: list[str] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        part = require_object(part, where)
        kind = part.get("type")
        if kind in ("text", "refusal"):
            value = part_text(part, kind, where)
            texts.append(value)
        elif kind == "image_url":
            url = part.get("image_url")
            images.append(image_data(url.get("url") if isinstance(url, dict) else url, where))
        else:
            raise UnsupportedParameter(
                f"Content parts of type {kind!r} are not supported by this model's provider.",
                param=where,
            )
    return "\n".join(texts), images


def _history_calls(calls: Any, names: dict[str, str], param: str) -> list[dict]:
    if not isinstance(calls, list):
        raise InvalidRequest("'tool_calls' must be a list.", param=param)
    out = []
    for k, call in enumerate(calls):
        where = f"{param}[{k}]"
        call = require_object(call, where)
        if call.get("type", "function") != "function":
            raise UnsupportedParameter("Only function tool calls are supported.", param=where)
        fn = require_object(call.get("function"), f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str):
            raise InvalidRequest("A tool call needs a function name.", param=f"{where}.function.name")
        if isinstance(call.get("id"), str):
            names[call["id"]] = name
        arguments = arguments_object(fn.get("arguments"), f"{where}.function.arguments")
        out.append({"function": {"name": name, "arguments": arguments}})
    return out


# -- answers -------------------------------------------------------------------------


def usage(resp: dict) -> dict:
    prompt, completion = token_counts(resp)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def openai_calls(calls: list[tuple[str, str, str]], start: int | None = None) -> list[dict]:
    out = []
    for k, (call_id, name, arguments) in enumerate(calls):
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        out.append(call if start is None else {"index": start + k, **call})
    return out


def chat_completion(resp: dict, *, model: str, completion_id: str, created: int) -> dict:
    """A non-streamed Ollama chat answer → `chat.completion`."""
    raise_if_error(resp)
    message = message_of(resp)
    calls = tool_calls(message)
    return chat_completion_object(
        completion_id=completion_id,
        created=created,
        model=model,
        content=message.get("content") or "",
        calls=openai_calls(calls) if calls else [],
        finish=finish_reason(resp.get("done_reason"), bool(calls)),
        usage=usage(resp),
    )
