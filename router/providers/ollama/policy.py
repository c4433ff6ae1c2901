"""The field policy of the normalized (Ollama) path, as data.

Each known request field maps to (policy, note):
- converted: sent to Ollama in its native form;
- conditional: converted for the values Ollama can honour, unsupported otherwise;
- ignored: not sent; named in `Conversion.ignored_fields` with the note;
- unsupported: rejected with `UnsupportedParameter` before dispatch.
A field outside the table is ignored as unknown, except the extensions in
`common.EXTENSION_OPTIONS` and `think`. docs/ renders these tables.
"""

from __future__ import annotations

# field → (policy, note). "converted"/"conditional" fields are handled in code.
CHAT_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "replaced by the provider's served model name"),
    "messages": ("converted", "system/developer/user/assistant/tool → Ollama messages"),
    "stream": ("converted", "always sent explicitly (Ollama defaults to true)"),
    "stream_options": ("converted", "include_usage adds the trailing usage chunk"),
    "temperature": ("converted", "options.temperature"),
    "top_p": ("converted", "options.top_p"),
    "seed": ("converted", "options.seed"),
    "stop": ("converted", "options.stop (a string becomes a one-item list)"),
    "max_completion_tokens": (
        "converted",
        "options.num_predict (wins over max_tokens)",
    ),
    "max_tokens": ("converted", "options.num_predict"),
    "frequency_penalty": ("converted", "options.frequency_penalty"),
    "presence_penalty": ("converted", "options.presence_penalty"),
    "response_format": (
        "conditional",
        "text → none, json_object → format 'json', json_schema → format <schema>; other types unsupported",
    ),
    "tools": ("conditional", "function tools → Ollama tools; custom tools unsupported"),
    "tool_choice": (
        "conditional",
        "auto ok; none drops tools; allowed_tools(auto) filters tools; required / a named tool unsupported",
    ),
    "reasoning_effort": (
        "converted",
        "think: none → false, minimal/low → 'low', medium, high/xhigh → 'high'",
    ),
    "n": ("conditional", "1 only; more choices are unsupported"),
    "logprobs": ("conditional", "false only; true is unsupported"),
    "modalities": ("conditional", "['text'] only; audio is unsupported"),
    "logit_bias": ("conditional", "empty only; token biases are unsupported"),
    "audio": ("unsupported", "audio output needs an audio model"),
    "functions": ("unsupported", "deprecated; send 'tools' instead"),
    "function_call": ("unsupported", "deprecated; send 'tool_choice' instead"),
    "web_search_options": ("unsupported", "no hosted web search"),
    "top_logprobs": ("ignored", "log probabilities are not returned"),
    "parallel_tool_calls": ("ignored", "Ollama cannot limit tool calls per turn"),
    "prediction": ("ignored", "predicted outputs only speed up generation"),
    "user": ("ignored", "end-user id has no Ollama equivalent"),
    "safety_identifier": ("ignored", "no Ollama equivalent"),
    "prompt_cache_key": ("ignored", "Ollama caches prompts on its own"),
    "prompt_cache_retention": ("ignored", "Ollama caches prompts on its own"),
    "metadata": ("ignored", "not sent to the provider"),
    "store": ("ignored", "completions are not stored"),
    "service_tier": ("ignored", "no service tiers"),
    "verbosity": ("ignored", "no Ollama equivalent"),
}

RESPONSES_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "replaced by the provider's served model name"),
    "input": (
        "converted",
        "string or items: message, function_call, function_call_output (reasoning items ignored)",
    ),
    "instructions": ("converted", "a leading system message"),
    "stream": ("converted", "always sent explicitly (Ollama defaults to true)"),
    "temperature": ("converted", "options.temperature"),
    "top_p": ("converted", "options.top_p"),
    "max_output_tokens": ("converted", "options.num_predict"),
    "text": (
        "conditional",
        "format text/json_object/json_schema → Ollama format; verbosity ignored",
    ),
    "tools": (
        "conditional",
        "function tools → Ollama tools; hosted and custom tools unsupported",
    ),
    "tool_choice": (
        "conditional",
        "auto ok; none drops tools; allowed_tools(auto) filters tools; required / a named tool unsupported",
    ),
    "reasoning": ("converted", "effort → think (as reasoning_effort); summary ignored"),
    "background": ("conditional", "false only; background runs need stored responses"),
    "include": ("conditional", "logprobs unsupported; other entries ignored"),
    "top_logprobs": ("conditional", "0 only; log probabilities are unsupported"),
    "previous_response_id": (
        "unsupported",
        "the router sends the stored conversation in its place (docs/responses.md)",
    ),
    "conversation": (
        "unsupported",
        "conversations are not stored; send the whole input",
    ),
    "prompt": ("unsupported", "stored prompt templates are not available"),
    "parallel_tool_calls": (
        "ignored",
        "Ollama cannot limit tool calls per turn (echoed in the response)",
    ),
    "max_tool_calls": ("ignored", "Ollama cannot limit tool calls"),
    "store": ("ignored", "the router stores the response itself (docs/responses.md)"),
    "metadata": ("ignored", "not sent to the provider (echoed in the response)"),
    "user": ("ignored", "end-user id has no Ollama equivalent"),
    "safety_identifier": ("ignored", "no Ollama equivalent"),
    "prompt_cache_key": ("ignored", "Ollama caches prompts on its own"),
    "prompt_cache_retention": ("ignored", "Ollama caches prompts on its own"),
    "service_tier": ("ignored", "no service tiers"),
    "truncation": ("ignored", "Ollama truncates to its context window on its own"),
    "stream_options": ("ignored", "no obfuscation padding is added"),
}

EMBED_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "replaced by the provider's served model name"),
    "input": (
        "conditional",
        "a string or a list of strings; token-id arrays unsupported",
    ),
    "dimensions": ("converted", "dimensions (Ollama truncates the vector)"),
    "encoding_format": ("converted", "float or base64, produced by the router"),
    "user": ("ignored", "end-user id has no Ollama equivalent"),
}
