"""Ollama chat answers → the Responses API `response` object and its items.

`envelope` echoes the request's parameters as OpenAI does; ids follow OpenAI's
prefixes (msg_, fc_, rs_, call_). Ollama's `thinking` text becomes a standard
`reasoning` item with `reasoning_text` content, placed before the message.
"""

from __future__ import annotations

from typing import Any

from router.providers.ollama.common import (
    message_of,
    new_id,
    raise_if_error,
    token_counts,
    tool_calls,
)


def usage(resp: dict) -> dict:
    prompt, completion = token_counts(resp)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def reasoning_item(item_id: str, text: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> dict:
    content = [] if text is None else [output_text(text)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def function_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _echo_tools(body: dict) -> list[dict]:
    out = []
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and tool.get("type") == "function":
            keep = ("type", "name", "description", "parameters", "strict")
            out.append({k: tool[k] for k in keep if k in tool})
    return out


def _echo_format(body: dict) -> dict:
    fmt = (body.get("text") or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") not in (
        "text",
        "json_object",
        "json_schema",
    ):
        return {"type": "text"}
    keep = ("type", "name", "schema", "description", "strict")
    return {k: fmt[k] for k in keep if k in fmt}


def _number_or_none(value: Any) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def envelope(
    *,
    response_id: str,
    created_at: int,
    model: str,
    request_body: dict,
    status: str,
    output: list[dict],
    usage: dict | None,
    error: dict | None = None,
) -> dict:
    """The `response` object, echoing the request's parameters as OpenAI does."""
    body = request_body if isinstance(request_body, dict) else {}
    choice = body.get("tool_choice")
    instructions = body.get("instructions")
    metadata = body.get("metadata")
    response = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": instructions if isinstance(instructions, str) else None,
        "max_output_tokens": _number_or_none(body.get("max_output_tokens")),
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "temperature": _number_or_none(body.get("temperature")),
        "text": {"format": _echo_format(body)},
        "tool_choice": choice if isinstance(choice, str | dict) else "auto",
        "tools": _echo_tools(body),
        "top_p": _number_or_none(body.get("top_p")),
        "metadata": metadata if isinstance(metadata, dict) else {},
        "usage": usage,
    }
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        response["reasoning"] = {"effort": reasoning["effort"], "summary": None}
    return response


def response_object(resp: dict, *, model: str, response_id: str, created_at: int, request_body: dict) -> dict:
    """A non-streamed Ollama chat answer → a Responses API `response` object."""
    raise_if_error(resp)
    message = message_of(resp)
    truncated = resp.get("done_reason") == "length"
    status = "incomplete" if truncated else "completed"
    output: list[dict] = []
    thinking = message.get("thinking")
    calls = tool_calls(message)
    content = message.get("content") or ""
    if thinking:
        # The token limit cut whatever was generated last.
        cut = truncated and not (content or calls)
        output.append(reasoning_item(new_id("rs"), thinking, "incomplete" if cut else "completed"))
    if content or not (calls or thinking):
        output.append(message_item(new_id("msg"), content, status))
    for call_id, name, arguments in calls:
        output.append(function_item(new_id("fc"), call_id, name, arguments, "completed"))
    return envelope(
        response_id=response_id,
        created_at=created_at,
        model=model,
        request_body=request_body,
        status=status,
        output=output,
        usage=usage(resp),
    )
