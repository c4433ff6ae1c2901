"""Chat Completions ↔ Gemini `generateContent`: the request and the whole answer.

Invariants: see `common`. Shapes: the REST API of the Generative Language
API v1beta (camelCase JSON), as google-genai's types describe them.

History tool calls carry no Gemini thought signature (OpenAI's tool calls have
no field to keep one), so the first functionCall part of each model turn is
sent with Google's documented placeholder signature, which Gemini 3 models
accept for history that comes from elsewhere.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.gemini.common import (
    EXTENSION_FIELDS,
    answer_calls,
    answer_text,
    apply_policy,
    finish_reason,
    parts_of,
    thought_text,
    usage,
)
from router.providers.gemini.policy import CHAT_POLICY
from router.providers.gemini.wire import model_path, raise_if_blocked, raise_if_error
from router.providers.normalized import REASONING, part_text
from router.providers.ollama.common import (
    Conversion,
    Ledger,
    arguments_object,
    function_tools,
    integer,
    number,
    require_object,
    stop_option,
)

PLACEHOLDER_SIGNATURE = "skip_thought_signature_validator"
EFFORT_TO_BUDGET = {"none": 0, "minimal": 1024, "low": 1024, "medium": 8192, "high": 24576, "xhigh": 24576}
_GENERATION = {
    "temperature": "temperature",
    "top_p": "topP",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    **EXTENSION_FIELDS,
}
_MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "tool_calls", "name", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}
_AUDIO = {"wav": "audio/wav", "mp3": "audio/mp3"}


def chat_request(body: dict, served_model: str) -> Conversion:
    """`/v1/chat/completions` body → Gemini `generateContent` body."""
    require_object(body)
    ledger = Ledger()
    apply_policy(body, CHAT_POLICY, ledger)
    _check_conditionals(body)
    system, contents = _contents(body.get("messages"), ledger)
    request: dict = {"contents": contents}
    if system:
        request["systemInstruction"] = {"parts": system}
    declarations, tool_config = _tools(body, ledger)
    if declarations:
        request["tools"] = [{"functionDeclarations": declarations}]
        if tool_config is not None:
            request["toolConfig"] = {"functionCallingConfig": tool_config}
    config = _generation_config(body)
    if config:
        request["generationConfig"] = config
    return ledger.done(request)


def count_request(body: dict, served_model: str) -> Conversion:
    """An OpenAI chat body → a `countTokens` body: the whole generate request
    (system instruction and tools count too); generation settings dropped."""
    conversion = chat_request(body, served_model)
    inner = {k: v for k, v in conversion.request.items() if k != "generationConfig"}
    conversion.request = {"generateContentRequest": {"model": model_path(served_model), **inner}}
    return conversion


def _check_conditionals(body: dict) -> None:
    if body.get("logprobs") is True:
        raise UnsupportedParameter("Log probabilities are not supported by this model's provider.", param="logprobs")
    if body.get("top_logprobs"):
        raise UnsupportedParameter(
            "Log probabilities are not supported by this model's provider.", param="top_logprobs"
        )
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise UnsupportedParameter("Only text output is supported by this model's provider.", param="modalities")
    if body.get("logit_bias"):
        raise UnsupportedParameter("logit_bias is not supported by this model's provider.", param="logit_bias")


def _generation_config(body: dict) -> dict:
    config: dict = {}
    for key, target in _GENERATION.items():
        value = integer(body, key) if key in ("seed", "top_k") else number(body, key)
        if value is not None:
            config[target] = value
    stop = stop_option(body)
    if stop:
        config["stopSequences"] = stop
    max_tokens = integer(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = integer(body, "max_tokens")
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    n = integer(body, "n")
    if n is not None:
        if n < 1:
            raise InvalidRequest("'n' must be at least 1.", param="n")
        if n > 1:
            config["candidateCount"] = n
    rf = body.get("response_format")
    if rf is not None:
        rf = require_object(rf, "response_format")
        kind = rf.get("type")
        if kind == "json_object":
            config["responseMimeType"] = "application/json"
        elif kind == "json_schema":
            config["responseMimeType"] = "application/json"
            spec = require_object(rf.get("json_schema"), "response_format.json_schema")
            schema = spec.get("schema")
            if schema is not None:
                config["responseJsonSchema"] = require_object(schema, "response_format.json_schema.schema")
        elif kind != "text":
            raise UnsupportedParameter(
                f"Output format {kind!r} is not supported by this model's provider.", param="response_format"
            )
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in EFFORT_TO_BUDGET:
            raise InvalidRequest(f"Unknown reasoning effort {effort!r}.", param="reasoning_effort")
        budget = EFFORT_TO_BUDGET[effort]
        # A client that asks for reasoning gets its text (reasoning_content):
        # Gemini sends thought parts only when asked to.
        config["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": True} if budget else {
            "thinkingBudget": 0
        }
    return config


# -- tools ---------------------------------------------------------------------------


def _tools(body: dict, ledger: Ledger) -> tuple[list[dict], dict | None]:
    declarations = []
    for param, tool in function_tools(body):
        fn = require_object(tool.get("function"), f"{param}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A function tool needs a name.", param=f"{param}.function.name")
        declaration: dict = {"name": name}
        if fn.get("description") is not None:
            declaration["description"] = fn["description"]
        if fn.get("parameters") is not None:
            declaration["parametersJsonSchema"] = require_object(fn["parameters"], f"{param}.function.parameters")
        for key in sorted(fn.keys() - {"name", "description", "parameters"}):
            ledger.ignore(f"tools[].function.{key}", "Gemini has no equivalent")
        declarations.append(declaration)
    choice = body.get("tool_choice")
    if choice is None or not declarations:
        if choice is not None:
            ledger.ignore("tool_choice", "no tools were given")
        return declarations, None
    names = [d["name"] for d in declarations]
    if choice == "auto":
        return declarations, {"mode": "AUTO"}
    if choice == "none":
        return declarations, {"mode": "NONE"}
    if choice == "required":
        return declarations, {"mode": "ANY"}
    if not isinstance(choice, dict):
        raise InvalidRequest("'tool_choice' must be auto, none, required or an object.", param="tool_choice")
    if choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if name not in names:
            raise InvalidRequest(f"tool_choice names {name!r}, which is not among the tools.", param="tool_choice")
        return declarations, {"mode": "ANY", "allowedFunctionNames": [name]}
    if choice.get("type") == "allowed_tools":
        spec = require_object(choice.get("allowed_tools"), "tool_choice.allowed_tools")
        allowed = [(t.get("function") or {}).get("name") for t in spec.get("tools") or () if isinstance(t, dict)]
        kept = [d for d in declarations if d["name"] in allowed]
        if not kept:
            raise InvalidRequest("tool_choice.allowed_tools names none of the tools.", param="tool_choice")
        mode = spec.get("mode")
        if mode == "auto":
            return kept, {"mode": "AUTO"}
        if mode == "required":
            return kept, {"mode": "ANY", "allowedFunctionNames": [d["name"] for d in kept]}
        raise InvalidRequest(f"Unknown allowed_tools mode {mode!r}.", param="tool_choice")
    raise UnsupportedParameter(
        f"tool_choice of type {choice.get('type')!r} is not supported by this model's provider.", param="tool_choice"
    )


# -- messages ------------------------------------------------------------------------


def _contents(messages: Any, ledger: Ledger) -> tuple[list[dict], list[dict]]:
    """OpenAI messages → (systemInstruction parts, contents), same roles merged."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list.", param="messages")
    system: list[dict] = []
    contents: list[dict] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        message = require_object(message, param)
        role = message.get("role")
        if role == "function":
            raise UnsupportedParameter("Function messages are deprecated; use tool messages.", param=f"{param}.role")
        if role not in _MESSAGE_KEYS:
            raise InvalidRequest(f"Unknown message role {role!r}.", param=f"{param}.role")
        for key in sorted(message.keys() - _MESSAGE_KEYS[role]):
            if key in ("audio", "function_call") and message[key] is not None:
                raise UnsupportedParameter(f"'{key}' in messages is not supported.", param=f"{param}.{key}")
            ledger.ignore(f"messages[].{key}", "Gemini contents have no such field")
        if message.get("name") is not None:
            ledger.ignore("messages[].name", "Gemini contents have no participant names")
        if role in ("system", "developer"):
            if contents:
                ledger.note(f"{param}: a {role} message after the conversation started joins systemInstruction")
            system.extend(_parts(message.get("content"), f"{param}.content", text_only=True))
            continue
        if role == "user":
            _append(contents, "user", _parts(message.get("content"), f"{param}.content"))
        elif role == "assistant":
            parts = _parts(message.get("content"), f"{param}.content", text_only=True)
            if message.get("tool_calls"):
                parts += _history_calls(message["tool_calls"], call_names, f"{param}.tool_calls")
            if not parts:
                ledger.note(f"{param}: an empty assistant message is not sent")
            _append(contents, "model", parts)
        else:
            call_id = message.get("tool_call_id")
            name = call_names.get(call_id) if isinstance(call_id, str) else None
            if name is None:
                raise InvalidRequest(
                    f"{param}.tool_call_id matches no tool call of an earlier assistant message.",
                    param=f"{param}.tool_call_id",
                )
            result = _text(message.get("content"), f"{param}.content")
            _append(contents, "user", [{"functionResponse": {"name": name, "response": {"result": result}}}])
    if not contents:
        raise InvalidRequest("The conversation needs at least one user message.", param="messages")
    return system, contents


def _append(contents: list[dict], role: str, parts: list[dict]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _text(content: Any, param: str) -> str:
    parts = _parts(content, param, text_only=True)
    return "\n".join(p["text"] for p in parts)


def _parts(content: Any, param: str, *, text_only: bool = False) -> list[dict]:
    """String or content parts → Gemini parts (empty text is not sent)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest("Message content must be a string or a list of parts.", param=param)
    out: list[dict] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        part = require_object(part, where)
        kind = part.get("type")
        if kind in ("text", "refusal"):
            value = part_text(part, kind, where)
            if value:
                out.append({"text": value})
            continue
        if text_only:
            raise UnsupportedParameter(
                f"Content parts of type {kind!r} are not supported in this message.", param=where
            )
        if kind == "image_url":
            image = part.get("image_url")
            out.append(_media(image.get("url") if isinstance(image, dict) else image, "image/", where))
        elif kind == "input_audio":
            audio = require_object(part.get("input_audio"), f"{where}.input_audio")
            mime = _AUDIO.get(str(audio.get("format")))
            data = audio.get("data")
            if mime is None or not isinstance(data, str):
                raise InvalidRequest("input_audio needs base64 'data' and a format of wav or mp3.", param=where)
            out.append({"inlineData": {"mimeType": mime, "data": data}})
        elif kind == "file":
            file = require_object(part.get("file"), f"{where}.file")
            if file.get("file_data") is None:
                raise UnsupportedParameter(
                    "Uploaded file ids are not available here; send the file as file_data.", param=where
                )
            out.append(_media(file["file_data"], "", where))
        else:
            raise UnsupportedParameter(
                f"Content parts of type {kind!r} are not supported by this model's provider.", param=where
            )
    return out


def _media(url: Any, prefix: str, param: str) -> dict:
    """A data: URL → inlineData; an http(s) URL → fileData with a guessed type."""
    if not isinstance(url, str):
        raise InvalidRequest("The URL must be a string.", param=param)
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        if not sep or not header.endswith(";base64"):
            raise InvalidRequest("A data: URL must be base64-encoded.", param=param)
        mime = header[: -len(";base64")]
        if not mime or not mime.startswith(prefix):
            raise InvalidRequest(
                f"The data: URL needs a media type{' of ' + prefix + '*' if prefix else ''}.", param=param
            )
        return {"inlineData": {"mimeType": mime, "data": data}}
    if url.startswith(("https://", "http://")):
        guessed, _ = mimetypes.guess_type(url.partition("?")[0])
        if guessed is None or not guessed.startswith(prefix):
            raise UnsupportedParameter(
                "The media type of this URL cannot be told from its name; send it as a base64 data: URL.",
                param=param,
            )
        return {"fileData": {"mimeType": guessed, "fileUri": url}}
    raise InvalidRequest("Only data: and http(s) URLs are accepted.", param=param)


def _history_calls(calls: Any, names: dict[str, str], param: str) -> list[dict]:
    if not isinstance(calls, list):
        raise InvalidRequest("'tool_calls' must be a list.", param=param)
    out: list[dict] = []
    for k, call in enumerate(calls):
        where = f"{param}[{k}]"
        call = require_object(call, where)
        if call.get("type", "function") != "function":
            raise UnsupportedParameter("Only function tool calls are supported.", param=where)
        fn = require_object(call.get("function"), f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A tool call needs a function name.", param=f"{where}.function.name")
        if isinstance(call.get("id"), str):
            names[call["id"]] = name
        args = arguments_object(fn.get("arguments"), f"{where}.function.arguments")
        part: dict = {"functionCall": {"name": name, "args": args}}
        if not out:
            part["thoughtSignature"] = PLACEHOLDER_SIGNATURE
        out.append(part)
    return out


# -- answers -------------------------------------------------------------------------


def openai_calls(calls: list[tuple[str, str, str]], start: int | None = None) -> list[dict]:
    out = []
    for k, (call_id, name, arguments) in enumerate(calls):
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        out.append(call if start is None else {"index": start + k, **call})
    return out


def _choice(position: int, candidate: dict) -> dict:
    parts = parts_of(candidate)
    calls = answer_calls(parts)
    text = answer_text(parts)
    message: dict = {
        "role": "assistant",
        "content": text if text or not calls else None,
        "refusal": None,
        "annotations": [],
    }
    thought = thought_text(parts)
    if thought:
        message[REASONING] = thought
    if calls:
        message["tool_calls"] = openai_calls(calls)
    index = candidate.get("index")
    return {
        "index": index if isinstance(index, int) else position,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason(candidate.get("finishReason"), bool(calls)),
    }


def chat_completion(resp: dict, *, model: str, completion_id: str, created: int) -> dict:
    """A `GenerateContentResponse` → `chat.completion` (raises `Blocked`)."""
    raise_if_error(resp)
    raise_if_blocked(resp)
    candidates = [c for c in resp.get("candidates") or () if isinstance(c, dict)]
    choices = sorted((_choice(i, c) for i, c in enumerate(candidates)), key=lambda c: c["index"])
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(resp.get("usageMetadata")),
    }


def token_count(resp: dict) -> int:
    """A `countTokens` answer → its total."""
    total = resp.get("totalTokens")
    return total if isinstance(total, int) and not isinstance(total, bool) else 0
