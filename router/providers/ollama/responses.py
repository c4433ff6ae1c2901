"""Responses API request → Ollama `/api/chat` request.

Invariants: see `common`. Nothing is stored, so anything that needs
server-side state (previous_response_id, conversation, prompt templates,
item references, background runs) is unsupported; the client sends the whole
conversation as `input` items. The answer side lives in
`response_object` and `responses_stream`.
"""

from __future__ import annotations

from typing import Any

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.normalized import responses_input
from router.providers.ollama.common import (
    Conversion,
    Ledger,
    apply_policy,
    arguments_object,
    boolean,
    choose_tools,
    function_tools,
    image_data,
    integer,
    json_format,
    ollama_tool,
    require_object,
    sampling_options,
    think_value,
)
from router.providers.ollama.policy import RESPONSES_POLICY

_CONVERTED_OPTIONS = {"temperature": "temperature", "top_p": "top_p"}
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


def responses_request(body: dict, served_model: str) -> Conversion:
    """`/v1/responses` body → Ollama `/api/chat` body."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, RESPONSES_POLICY, ledger)
    _check_conditionals(body, ledger)

    request: dict = {
        "model": served_model,
        "messages": _messages(body, ledger),
        "stream": boolean(body, "stream", False),
    }
    tools = _tools(body, ledger)
    if tools:
        request["tools"] = tools
    text = body.get("text")
    if text is not None:
        text = require_object(text, "text")
        if text.get("verbosity") is not None:
            ledger.ignore("text.verbosity", "Ollama has no equivalent")
        fmt = text.get("format")
        if fmt is not None:
            fmt = require_object(fmt, "text.format")
            native = json_format(fmt.get("type"), fmt.get("schema"), "text.format")
            if native is not None:
                request["format"] = native
    options = sampling_options(body, _CONVERTED_OPTIONS)
    max_tokens = integer(body, "max_output_tokens")
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    if options:
        request["options"] = options
    reasoning = body.get("reasoning")
    effort = None
    if reasoning is not None:
        reasoning = require_object(reasoning, "reasoning")
        effort = reasoning.get("effort")
        for key in sorted(reasoning.keys() - {"effort"}):
            if reasoning[key] is not None:
                ledger.ignore(f"reasoning.{key}", "Ollama has no equivalent")
    think = think_value(body, effort, "reasoning.effort")
    if think is not None:
        request["think"] = think
    return ledger.done(request)


def _check_conditionals(body: dict, ledger: Ledger) -> None:
    if body.get("background") is True:
        raise UnsupportedParameter(
            "Background responses are not supported by this model's provider.",
            param="background",
        )
    top = integer(body, "top_logprobs")
    if top:
        raise UnsupportedParameter(
            "Log probabilities are not supported by this model's provider.",
            param="top_logprobs",
        )
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list):
            raise InvalidRequest("'include' must be a list.", param="include")
        for entry in include:
            if isinstance(entry, str) and "logprobs" in entry:
                raise UnsupportedParameter(
                    "Log probabilities are not supported by this model's provider.",
                    param="include",
                )
        if include:
            ledger.ignore("include", "nothing extra is available to include")


def _tools(body: dict, ledger: Ledger) -> list[dict]:
    tools = []
    for param, tool in function_tools(body):
        for key in sorted(tool.keys() - {"type", "name", "description", "parameters"}):
            ledger.ignore(f"tools[].{key}", "Ollama has no equivalent")
        tools.append(ollama_tool(tool.get("name"), tool.get("description"), tool.get("parameters"), param))
    choice = body.get("tool_choice")
    allowed = None
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        names = [t.get("name") for t in choice.get("tools") or () if isinstance(t, dict)]
        allowed = (choice.get("mode"), names)
    elif choice is not None and not isinstance(choice, str | dict):
        raise InvalidRequest("'tool_choice' must be a string or an object.", param="tool_choice")
    return choose_tools(tools, choice, allowed, ledger)


def _messages(body: dict, ledger: Ledger) -> list[dict]:
    out, items = responses_input(body)
    if items is None:
        return out
    call_names: dict[str, str] = {}
    for i, item in enumerate(items):
        param = f"input[{i}]"
        item = require_object(item, param)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, param))
        elif kind == "function_call":
            call = _history_call(item, param)
            call_names[item["call_id"]] = call["function"]["name"]
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append(_tool_output(item, call_names, param, ledger))
        elif kind == "reasoning":
            ledger.ignore("input[].reasoning", "earlier reasoning items are not sent to Ollama")
        else:
            raise UnsupportedParameter(
                f"Input items of type {kind!r} are not supported by this model's provider.",
                param=f"{param}.type",
            )
    return out


def _message(item: dict, param: str) -> dict:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise InvalidRequest(f"Unknown message role {role!r}.", param=f"{param}.role")
    text, images = _content(item.get("content"), f"{param}.content")
    native: dict = {"role": "system" if role == "developer" else role, "content": text}
    if images:
        native["images"] = images
    return native


def _content(content: Any, param: str) -> tuple[str, list[str]]:
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise InvalidRequest("Content must be a string or a list of parts.", param=param)
    texts: list[str] = []
    images: list[str] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        part = require_object(part, where)
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            value = part.get(_TEXT_PARTS[kind])
            if not isinstance(value, str):
                raise InvalidRequest(f"A {kind} part needs a string.", param=where)
            texts.append(value)
        elif kind == "input_image":
            if part.get("image_url") is None:
                raise UnsupportedParameter(
                    "Images by file_id are not supported; send a base64 data: URL.",
                    param=where,
                )
            images.append(image_data(part["image_url"], where))
        else:
            raise UnsupportedParameter(
                f"Content parts of type {kind!r} are not supported by this model's provider.",
                param=where,
            )
    return "\n".join(texts), images


def _history_call(item: dict, param: str) -> dict:
    name = item.get("name")
    if not isinstance(name, str) or not isinstance(item.get("call_id"), str):
        raise InvalidRequest("A function_call item needs 'call_id' and 'name'.", param=param)
    return {
        "function": {
            "name": name,
            "arguments": arguments_object(item.get("arguments"), f"{param}.arguments"),
        }
    }


def _tool_output(item: dict, names: dict[str, str], param: str, ledger: Ledger) -> dict:
    output = item.get("output")
    if output is None:
        raise InvalidRequest("A function_call_output item needs 'output'.", param=param)
    text, images = _content(output, f"{param}.output")
    native: dict = {"role": "tool", "content": text}
    if images:
        native["images"] = images
    call_id = item.get("call_id")
    name = names.get(call_id) if isinstance(call_id, str) else None
    if name:
        native["tool_name"] = name
    else:
        ledger.note(f"{param}: call_id matches no earlier function_call; tool_name not sent")
    return native
