"""The field policy of the Responses bridge, as data.

Each known `/v1/responses` request field maps to (policy, note):
- converted: sent in the Chat Completions body (the inner provider then
  applies its own chat policy to it);
- conditional: converted for the values a chat provider can honour,
  unsupported otherwise;
- ignored: not sent; named in `Conversion.ignored_fields` with the note;
- unsupported: rejected with `UnsupportedParameter` before dispatch.
A field outside the table is ignored as unknown. docs/providers/responses-bridge.md
renders this table (tests/router/providers/test_bridge_docs.py keeps them equal).
"""

from __future__ import annotations

# field → (policy, note). "converted"/"conditional" fields are handled in code.
RESPONSES_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "model (the provider sends its served name)"),
    "input": (
        "converted",
        "string → one user message; items: message, function_call, function_call_output → chat messages "
        "(reasoning items ignored, other items unsupported)",
    ),
    "instructions": ("converted", "a leading system message"),
    "stream": ("converted", "stream, with stream_options.include_usage true (the usage of response.completed)"),
    "temperature": ("converted", "temperature"),
    "top_p": ("converted", "top_p"),
    "max_output_tokens": ("converted", "max_completion_tokens"),
    "text": (
        "conditional",
        "format text → nothing (the default), json_object / json_schema → response_format; "
        "verbosity → verbosity; other formats unsupported",
    ),
    "tools": ("conditional", "function tools → chat function tools; hosted and custom tools unsupported"),
    "tool_choice": (
        "conditional",
        "none / auto / required as is, a named function and allowed_tools → their chat shapes; "
        "hosted tool choices unsupported",
    ),
    "reasoning": ("converted", "effort → reasoning_effort; summary ignored"),
    "parallel_tool_calls": ("converted", "parallel_tool_calls (sent only with tools)"),
    "user": ("converted", "user"),
    "safety_identifier": ("converted", "safety_identifier"),
    "prompt_cache_key": ("converted", "prompt_cache_key"),
    "prompt_cache_retention": ("converted", "prompt_cache_retention"),
    "service_tier": ("converted", "service_tier"),
    "background": ("conditional", "false only; background runs need stored responses"),
    "include": ("conditional", "logprobs unsupported; other entries ignored"),
    "top_logprobs": ("conditional", "0 only; log probabilities are unsupported"),
    "previous_response_id": ("unsupported", "the router sends the stored conversation in its place (docs/responses.md)"),
    "conversation": ("unsupported", "conversations are not stored; send the whole input"),
    "prompt": ("unsupported", "stored prompt templates are not available"),
    "max_tool_calls": ("ignored", "chat providers cannot limit tool calls"),
    "store": ("ignored", "the router stores the response itself (docs/responses.md)"),
    "metadata": ("ignored", "not sent to the provider (echoed in the response)"),
    "truncation": ("ignored", "the provider truncates to its context window on its own"),
    "stream_options": ("ignored", "no obfuscation padding is added"),
}
