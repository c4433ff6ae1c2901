"""Chat Completions request → Anthropic Messages request (`POST /v1/messages`).

The messages are `messages.system_and_turns`; this module maps the other
fields (see `policy.CHAT_POLICY`): `max_tokens` (required upstream, 4096 by
default), thinking, stop sequences, sampling, tools and tool_choice, the end
user; and cuts a body to what `count_tokens` takes.
"""

from __future__ import annotations

from typing import Any

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
from router.providers.anthropic.messages import system_and_turns
from router.providers.anthropic.policy import CHAT_POLICY, EXTENSIONS
from router.providers.normalized import each_function_tool, stop_option

DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; OpenAI does not
THINKING_BUDGET = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 16384}
# What POST /v1/messages/count_tokens takes (it refuses max_tokens, stream, …).
COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers")


def chat_request(body: dict, served_model: str) -> Conversion:
    """`/v1/chat/completions` body → Anthropic `/v1/messages` body."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, CHAT_POLICY, ledger, EXTENSIONS)
    _check_conditionals(body)
    system, messages = system_and_turns(body.get("messages"), ledger)
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
    stop = stop_option(body)
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


# -- tools -------------------------------------------------------------------------


def _tools(body: dict, ledger: Ledger) -> list[dict]:
    out = []
    for param, tool in each_function_tool(body, require_object):
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
