"""A Chat Completions answer → the Responses API `response` object.

The response echoes the request's parameters as OpenAI does (the Ollama
provider's `envelope`, shared); ids follow OpenAI's prefixes (resp_, msg_,
fc_), and a function call keeps the chat tool call's id as its `call_id`, so
the client's function_call_output finds it again on the next turn.
"""

from __future__ import annotations

from typing import Any

from router.core.errors import UpstreamError
from router.providers.normalized import new_id
from router.providers.ollama.response_object import envelope, function_item, message_item

# finish_reason → the Responses `incomplete_details.reason` (absent: completed).
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _count(obj: Any, key: str) -> int:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(chat_usage: Any) -> dict | None:
    """Chat `usage` → Responses `usage` (None when the provider sent none)."""
    if not isinstance(chat_usage, dict):
        return None
    prompt, completion = _count(chat_usage, "prompt_tokens"), _count(chat_usage, "completion_tokens")
    total = _count(chat_usage, "total_tokens") or prompt + completion
    prompt_details = chat_usage.get("prompt_tokens_details")
    completion_details = chat_usage.get("completion_tokens_details")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": _count(prompt_details, "cached_tokens"),
            "cache_write_tokens": _count(prompt_details, "cache_write_tokens"),
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(completion_details, "reasoning_tokens")},
        "total_tokens": total,
    }


def refusal_part(text: str) -> dict:
    return {"type": "refusal", "refusal": text}


def finish_response(response: dict, reason: str | None) -> dict:
    """Set `incomplete_details` for the incomplete reason (envelope assumes the token limit)."""
    if response["status"] == "incomplete":
        response["incomplete_details"] = {"reason": reason or "max_output_tokens"}
    return response


def chat_to_response(completion: Any, *, model: str, response_id: str, created_at: int, request_body: dict) -> dict:
    """A non-streamed ChatCompletion → a Responses API `response` object.

    Raises `UpstreamError` for an answer that is not a chat completion."""
    if not isinstance(completion, dict):
        raise UpstreamError("The provider's answer is not a JSON object.")
    if "error" in completion:
        error = completion["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise UpstreamError(f"The provider answered with an error: {message}"[:1000])
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamError("The provider's answer has no choices.")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UpstreamError("The provider's answer has no message.")
    reason = INCOMPLETE.get(choice.get("finish_reason"))  # type: ignore[arg-type]
    status = "incomplete" if reason else "completed"
    output: list[dict] = []
    content, refusal = message.get("content"), message.get("refusal")
    calls = [c for c in message.get("tool_calls") or () if _is_function_call(c)]
    if content or refusal or not calls:
        item = message_item(new_id("msg"), content if isinstance(content, str) else "", status)
        if refusal and isinstance(refusal, str):
            if not content:
                item["content"] = []
            item["content"].append(refusal_part(refusal))
        output.append(item)
    for call in calls:
        function = call["function"]
        arguments = function.get("arguments")
        output.append(
            function_item(
                new_id("fc"),
                call.get("id") or new_id("call"),
                function["name"],
                arguments if isinstance(arguments, str) else "{}",
                "completed",
            )
        )
    response = envelope(
        response_id=response_id,
        created_at=created_at,
        model=model,
        request_body=request_body,
        status=status,
        output=output,
        usage=usage_of(completion.get("usage")),
    )
    return finish_response(response, reason)


def _is_function_call(call: Any) -> bool:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        return False
    function = call.get("function")
    return isinstance(function, dict) and isinstance(function.get("name"), str)
