"""The field policy of the Gemini (normalized) path, as data.

Each known request field maps to (policy, note), as in `ollama.policy`:
converted / conditional (converted for the values Gemini can honour, 400
otherwise) / ignored (named in the observation) / unsupported (400 before
dispatch). A field outside the table is ignored as unknown, except the
extensions in `common.EXTENSIONS`. docs/providers/gemini.md renders them.
"""

from __future__ import annotations

CHAT_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "models/<served model> in the URL"),
    "messages": (
        "converted",
        "system/developer → systemInstruction; user → user, assistant → model, tool → functionResponse (user turn)",
    ),
    "stream": ("converted", "streamGenerateContent?alt=sse instead of generateContent"),
    "stream_options": ("converted", "include_usage adds the trailing usage chunk"),
    "temperature": ("converted", "generationConfig.temperature"),
    "top_p": ("converted", "generationConfig.topP"),
    "seed": ("converted", "generationConfig.seed"),
    "stop": ("converted", "generationConfig.stopSequences (a string becomes a one-item list)"),
    "max_completion_tokens": ("converted", "generationConfig.maxOutputTokens (wins over max_tokens)"),
    "max_tokens": ("converted", "generationConfig.maxOutputTokens"),
    "frequency_penalty": ("converted", "generationConfig.frequencyPenalty"),
    "presence_penalty": ("converted", "generationConfig.presencePenalty"),
    "n": ("converted", "generationConfig.candidateCount"),
    "response_format": (
        "conditional",
        "text → none, json_object → responseMimeType application/json, "
        "json_schema → + responseJsonSchema; other types unsupported",
    ),
    "tools": ("conditional", "function tools → functionDeclarations (parametersJsonSchema); custom tools unsupported"),
    "tool_choice": (
        "converted",
        "auto → AUTO, none → NONE, required → ANY, a named tool → ANY + allowedFunctionNames, "
        "allowed_tools → AUTO/ANY + allowedFunctionNames",
    ),
    "reasoning_effort": (
        "converted",
        "thinkingConfig.thinkingBudget: none 0, minimal/low 1024, medium 8192, high/xhigh 24576; above 0 also "
        "includeThoughts (the thought text comes back as reasoning_content)",
    ),
    "logprobs": ("conditional", "false only; true is unsupported"),
    "top_logprobs": ("conditional", "0 only; log probabilities are unsupported"),
    "modalities": ("conditional", "['text'] only; audio output is unsupported"),
    "logit_bias": ("conditional", "empty only; token biases are unsupported"),
    "audio": ("unsupported", "audio output is not available on this path"),
    "functions": ("unsupported", "deprecated; send 'tools' instead"),
    "function_call": ("unsupported", "deprecated; send 'tool_choice' instead"),
    "web_search_options": ("unsupported", "no hosted web search on this path"),
    "parallel_tool_calls": ("ignored", "Gemini cannot limit tool calls per turn"),
    "prediction": ("ignored", "predicted outputs only speed up generation"),
    "user": ("ignored", "end-user id has no Gemini equivalent"),
    "safety_identifier": ("ignored", "no Gemini equivalent"),
    "prompt_cache_key": ("ignored", "Gemini caches prompts on its own (implicit caching)"),
    "prompt_cache_retention": ("ignored", "Gemini caches prompts on its own (implicit caching)"),
    "metadata": ("ignored", "not sent to the provider"),
    "store": ("ignored", "completions are not stored"),
    "service_tier": ("ignored", "no service tiers"),
    "verbosity": ("ignored", "no Gemini equivalent"),
}

EMBED_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "models/<served model> in the URL (and in each batch request)"),
    "input": (
        "conditional",
        "a string → embedContent, a list of strings → batchEmbedContents; token-id arrays unsupported",
    ),
    "dimensions": ("converted", "outputDimensionality"),
    "encoding_format": ("converted", "float or base64, produced by the router"),
    "user": ("ignored", "end-user id has no Gemini equivalent"),
}
