"""The field policy of the Anthropic kind (normalized path), as data.

Each known Chat Completions field maps to (policy, note):
- converted: sent to Anthropic's Messages API in its native form;
- conditional: converted for the values Anthropic can honour, unsupported otherwise;
- ignored: not sent; named in `Conversion.ignored_fields` with the note;
- unsupported: rejected with `UnsupportedParameter` before dispatch.
A field outside the table is ignored as unknown, except the extension `top_k`.
docs/providers/anthropic.md renders this table.
"""

from __future__ import annotations

# field → (policy, note). "converted"/"conditional" fields are handled in code.
CHAT_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "replaced by the provider's served model name"),
    "messages": ("converted", "system/developer → system; user/assistant/tool → alternating Messages turns"),
    "stream": ("converted", "stream; the SSE events are translated to chat.completion.chunk"),
    "stream_options": ("converted", "include_usage adds the trailing usage chunk"),
    "max_completion_tokens": ("converted", "max_tokens (wins over max_tokens)"),
    "max_tokens": ("converted", "max_tokens; 4096 when neither is given (Anthropic requires one)"),
    "temperature": ("conditional", "temperature, 0..1 only (Anthropic's range); above 1 is unsupported"),
    "top_p": ("converted", "top_p"),
    "stop": ("converted", "stop_sequences (a string becomes a one-item list)"),
    "tools": ("conditional", "function tools → {name, description, input_schema}; custom tools unsupported"),
    "tool_choice": (
        "conditional",
        "auto → auto, none → none, required → any, a named function → tool; allowed_tools unsupported",
    ),
    "parallel_tool_calls": ("converted", "false → tool_choice.disable_parallel_tool_use"),
    "user": ("converted", "metadata.user_id"),
    "reasoning_effort": (
        "converted",
        "thinking: none → off, minimal/low → 1024, medium → 4096, high/xhigh → 16384 budget tokens "
        "(the thinking text comes back as reasoning_content)",
    ),
    "response_format": ("conditional", "text only; json_object / json_schema are unsupported"),
    "n": ("conditional", "1 only; more choices are unsupported"),
    "logprobs": ("conditional", "false only; true is unsupported"),
    "modalities": ("conditional", "['text'] only; audio is unsupported"),
    "logit_bias": ("conditional", "empty only; token biases are unsupported"),
    "audio": ("unsupported", "audio output is not available"),
    "functions": ("unsupported", "deprecated; send 'tools' instead"),
    "function_call": ("unsupported", "deprecated; send 'tool_choice' instead"),
    "web_search_options": ("unsupported", "no hosted web search on this path"),
    "top_logprobs": ("ignored", "log probabilities are not returned"),
    "prediction": ("ignored", "predicted outputs only speed up generation"),
    "seed": ("ignored", "Anthropic has no seed"),
    "frequency_penalty": ("ignored", "Anthropic has no frequency penalty"),
    "presence_penalty": ("ignored", "Anthropic has no presence penalty"),
    "safety_identifier": ("ignored", "not sent (user is metadata.user_id)"),
    "prompt_cache_key": ("ignored", "Anthropic caches with cache_control blocks, not a key"),
    "prompt_cache_retention": ("ignored", "Anthropic caches with cache_control blocks"),
    "metadata": ("ignored", "not sent to the provider"),
    "store": ("ignored", "completions are not stored"),
    "service_tier": ("ignored", "not sent"),
    "verbosity": ("ignored", "no Anthropic equivalent"),
}

# Fields outside the OpenAI API that this kind honours.
EXTENSIONS = frozenset({"top_k"})
