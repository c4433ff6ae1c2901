"""Responses API request → Chat Completions request.

Invariants:
- Pure: dicts in, dicts out; no Django, no I/O.
- Every field is converted, ignored (named in `Conversion.ignored_fields`
  with a reason in `notes`) or rejected with `UnsupportedParameter` before
  anything is produced (`policy.RESPONSES_POLICY`).
- Nothing is stored, so whatever needs server-side state (previous_response_id,
  conversation, prompt templates, item references, file ids, background runs)
  is unsupported: the client sends the whole conversation as `input` items.
- The chat body is what the OpenAI Chat Completions API accepts; the inner
  provider applies its own chat policy to it.
"""

from __future__ import annotations

from typing import Any

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.bridge.policy import RESPONSES_POLICY
from router.providers.normalized import (
    Conversion,
    Ledger,
    apply_policy,
    boolean,
    each_function_tool,
    integer,
    number,
    require_object,
    responses_input,
)

# Responses fields sent under the same chat name, when given (not null).
_SAME_NAME = (
    "temperature",
    "top_p",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "service_tier",
)
_NUMBERS = ("temperature", "top_p")
_ROLES = ("user", "assistant", "system", "developer")
_FORMATS = ("text", "json_object", "json_schema")


def responses_to_chat(body: dict) -> Conversion:
    """`/v1/responses` body → `/v1/chat/completions` body (model kept as sent)."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, RESPONSES_POLICY, ledger, frozenset(), "the provider")
    _check_conditionals(body, ledger)

    chat: dict[str, Any] = {"model": body.get("model"), "messages": _messages(body, ledger)}
    for key in _SAME_NAME:
        value = number(body, key) if key in _NUMBERS else body.get(key)
        if value is not None:
            chat[key] = value
    max_tokens = integer(body, "max_output_tokens")
    if max_tokens is not None:
        chat["max_completion_tokens"] = max_tokens
    tools = _tools(body, ledger)
    if tools:
        chat["tools"] = tools
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        parallel = boolean(body, "parallel_tool_calls", True)
        if tools:
            chat["parallel_tool_calls"] = parallel
        else:  # the Chat API refuses parallel_tool_calls without tools
            ledger.ignore("parallel_tool_calls", "no tools were sent")
    _text(body, chat, ledger)
    _reasoning(body, chat, ledger)
    if boolean(body, "stream", False):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return ledger.done(chat)


def _check_conditionals(body: dict, ledger: Ledger) -> None:
    if boolean(body, "background", False):
        raise UnsupportedParameter(
            "Background responses are not supported by this model's provider.", param="background"
        )
    if integer(body, "top_logprobs"):
        raise UnsupportedParameter(
            "Log probabilities are not supported by this model's provider.", param="top_logprobs"
        )
    include = body.get("include")
    if include is None:
        return
    if not isinstance(include, list):
        raise InvalidRequest("'include' must be a list.", param="include")
    for entry in include:
        if isinstance(entry, str) and "logprobs" in entry:
            raise UnsupportedParameter("Log probabilities are not supported by this model's provider.", param="include")
    if include:
        ledger.ignore("include", "nothing extra is available to include")


# -- input ---------------------------------------------------------------------------


def _messages(body: dict, ledger: Ledger) -> list[dict]:
    out, items = responses_input(body)
    if items is None:
        return out
    for i, item in enumerate(items):
        param = f"input[{i}]"
        item = require_object(item, param)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, param))
        elif kind == "function_call":
            call = _call(item, param)
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # one turn's calls, together
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append(_tool_output(item, param))
        elif kind == "reasoning":
            ledger.ignore("input[].reasoning", "earlier reasoning items are not sent to chat providers")
        else:
            raise UnsupportedParameter(
                f"Input items of type {kind!r} are not supported by this model's provider.", param=f"{param}.type"
            )
    return out


def _message(item: dict, param: str) -> dict:
    role = item.get("role")
    if role not in _ROLES:
        raise InvalidRequest(f"Unknown message role {role!r}.", param=f"{param}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise InvalidRequest("Content must be a string or a list of parts.", param=f"{param}.content")
    parts = [_part(part, role, f"{param}.content[{j}]") for j, part in enumerate(content)]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": role, "content": parts[0]["text"]}
    return {"role": role, "content": parts}


def _part(part: Any, role: str, param: str) -> dict:
    part = require_object(part, param)
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequest(f"A {kind} part needs a string 'text'.", param=param)
        return {"type": "text", "text": text}
    if kind == "refusal" and role == "assistant":
        refusal = part.get("refusal")
        if not isinstance(refusal, str):
            raise InvalidRequest("A refusal part needs a string 'refusal'.", param=param)
        return {"type": "refusal", "refusal": refusal}
    if kind == "input_image" and role == "user":
        url = part.get("image_url")
        if url is None:
            raise UnsupportedParameter(
                "Images by file_id are not supported (files are not stored); send an image_url.", param=param
            )
        if not isinstance(url, str):
            raise InvalidRequest("'image_url' must be a string.", param=param)
        image: dict = {"url": url}
        detail = part.get("detail")
        if detail in ("low", "high", "auto"):
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    raise UnsupportedParameter(
        f"Content parts of type {kind!r} in a {role} message are not supported by this model's provider.",
        param=param,
    )


def _call(item: dict, param: str) -> dict:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise InvalidRequest("A function_call item needs 'call_id' and 'name'.", param=param)
    if not isinstance(arguments, str):
        raise InvalidRequest("A function_call item needs 'arguments' as a JSON string.", param=f"{param}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_output(item: dict, param: str) -> dict:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest("A function_call_output item needs 'call_id'.", param=param)
    if isinstance(output, str):
        return {"role": "tool", "tool_call_id": call_id, "content": output}
    if not isinstance(output, list):
        raise InvalidRequest("A function_call_output item needs 'output'.", param=f"{param}.output")
    parts = []
    for j, part in enumerate(output):
        where = f"{param}.output[{j}]"
        part = require_object(part, where)
        if part.get("type") != "input_text" or not isinstance(part.get("text"), str):
            raise UnsupportedParameter("Chat providers take only text as a function call's output.", param=where)
        parts.append({"type": "text", "text": part["text"]})
    return {"role": "tool", "tool_call_id": call_id, "content": parts}


# -- tools, format, reasoning -----------------------------------------------------------


def _tools(body: dict, ledger: Ledger) -> list[dict]:
    out = []
    for param, tool in each_function_tool(body):
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A function tool needs a name.", param=param)
        function: dict = {"name": name}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        for key in sorted(tool.keys() - {"type", "name", "description", "parameters", "strict"}):
            ledger.ignore(f"tools[].{key}", "chat function tools have no equivalent")
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if not isinstance(choice, dict):
        raise InvalidRequest("'tool_choice' must be none, auto, required or an object.", param="tool_choice")
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": _function_name(choice)}}
    if kind == "allowed_tools":
        mode = choice.get("mode")
        if mode not in ("auto", "required"):
            raise InvalidRequest(f"Unknown allowed_tools mode {mode!r}.", param="tool_choice.mode")
        tools = choice.get("tools")
        if not isinstance(tools, list):
            raise InvalidRequest("allowed_tools needs a list of 'tools'.", param="tool_choice.tools")
        refs = []
        for tool in tools:
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise UnsupportedParameter(
                    "Only function tools can be allowed by this model's provider.", param="tool_choice.tools"
                )
            refs.append({"type": "function", "function": {"name": _function_name(tool)}})
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": refs}}
    raise UnsupportedParameter(
        f"A tool_choice of type {kind!r} is not supported by this model's provider.", param="tool_choice"
    )


def _function_name(obj: dict) -> str:
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("A function tool choice needs a name.", param="tool_choice")
    return name


def _text(body: dict, chat: dict, ledger: Ledger) -> None:
    text = body.get("text")
    if text is None:
        return
    text = require_object(text, "text")
    for key in sorted(text.keys() - {"format", "verbosity"}):
        if text[key] is not None:
            ledger.ignore(f"text.{key}", "chat providers have no equivalent")
    if text.get("verbosity") is not None:
        chat["verbosity"] = text["verbosity"]
    fmt = text.get("format")
    if fmt is None:
        return
    fmt = require_object(fmt, "text.format")
    kind = fmt.get("type")
    if kind not in _FORMATS:
        raise UnsupportedParameter(
            f"Output format {kind!r} is not supported by this model's provider.", param="text.format"
        )
    if kind == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        if not isinstance(fmt.get("name"), str) or not isinstance(fmt.get("schema"), dict):
            raise InvalidRequest("A json_schema format needs a 'name' and a 'schema' object.", param="text.format")
        schema = {k: fmt[k] for k in ("name", "description", "schema", "strict") if fmt.get(k) is not None}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}


def _reasoning(body: dict, chat: dict, ledger: Ledger) -> None:
    reasoning = body.get("reasoning")
    if reasoning is None:
        return
    reasoning = require_object(reasoning, "reasoning")
    effort = reasoning.get("effort")
    if effort is not None:
        if not isinstance(effort, str):
            raise InvalidRequest("'reasoning.effort' must be a string.", param="reasoning.effort")
        chat["reasoning_effort"] = effort
    for key in sorted(reasoning.keys() - {"effort"}):
        if reasoning[key] is not None:
            ledger.ignore(f"reasoning.{key}", "chat providers return no reasoning summary")
