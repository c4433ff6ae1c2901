"""A fake Google Gemini API (Generative Language API, REST, v1beta and v1).

    python -m fakes.gemini_backend --host 127.0.0.1 --port 8300 \\
        --name demo-gemini --models gemini-2.5-flash,gemini-embedding-001 [--quiet]

Endpoints (each under `/v1beta` and `/v1`):
POST models/{m}:generateContent, :streamGenerateContent (SSE with `?alt=sse`,
a JSON array without), :countTokens, :embedContent, :batchEmbedContents;
GET models (paged: pageSize, pageToken) and models/{m}.

Auth is Google's: the key in `x-goog-api-key` must be `api_key`
(`FAKE_API_KEY` by default). No key is 403 PERMISSION_DENIED; a wrong one is
400 INVALID_ARGUMENT with the ErrorInfo reason API_KEY_INVALID, as Google
answers. A `key=` query parameter (which Google accepts) is refused here with
400, so a router that puts the key in the URL fails its tests.

Errors have Google's shape `{"error": {"code", "message", "status"}}` (also
for `Behavior.status`). Requests are checked as the real API checks them:
an unknown field, a role other than user/model, an empty `parts`, a part
with no or two kinds of data, a function response that does not answer the
function calls of the turn right before it, both `parameters` and
`parametersJsonSchema`, a key `parameters` (the OpenAPI subset) does not know
(e.g. `additionalProperties`), `allowedFunctionNames` without mode ANY → 400
INVALID_ARGUMENT. An unknown model, or one without the method (a chat model
asked to embed), is 404 NOT_FOUND.

The reply says "Hello from <name>." in `Behavior.chunks` pieces (one SSE
frame each); `maxOutputTokens` no larger than that truncates it (MAX_TOKENS);
`responseMimeType: application/json` makes it JSON (following
`responseJsonSchema`); `candidateCount` repeats it per candidate. With
function declarations, a last user text mentioning "weather" (or mode ANY)
yields a functionCall part (with a thoughtSignature, as Gemini 3 sends);
after a functionResponse the reply is text. Safety: a user text containing
`blocked-prompt` gets `promptFeedback.blockReason: SAFETY` and no candidates;
`unsafe-reply` gets a candidate with finishReason SAFETY and no content.
A thinking budget above 0 reports `thoughtsTokenCount`, and
`includeThoughts` adds a `thought: true` part (in a stream, two frames of
thought parts before the answer). Embeddings have
`outputDimensionality` values (default 8).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import orjson
from aiohttp import web

from .server import (
    FAKE_KEY,
    MAX_BODY,
    Behavior,
    Faults,
    IdGen,
    Recorded,
    ServerThread,
    StreamWriter,
    cli,
    count_tokens,
    embedding_vector,
    reply_pieces,
    schema_example,
    split_text,
    thread_for,
    tool_arguments,
)

__all__ = ["FAKE_API_KEY", "main", "make_app", "server_thread"]

FAKE_API_KEY = "AIzaSy-fake-gemini-key-0123456789"
JSON_HEADERS = {"Content-Type": "application/json; charset=UTF-8"}
SSE_HEADERS = {"Content-Type": "text/event-stream"}
THOUGHT_SIGNATURE = base64.b64encode(b"fake-thought-signature").decode()

STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

_REQUEST_KEYS = {
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
    "model",
}
_DATA_KEYS = {
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
}
_PART_KEYS = _DATA_KEYS | {"thought", "thoughtSignature", "videoMetadata", "mediaResolution"}
_DECLARATION_KEYS = {
    "name",
    "description",
    "parameters",
    "parametersJsonSchema",
    "response",
    "responseJsonSchema",
    "behavior",
}
_TOOL_KEYS = {"functionDeclarations", "googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext"}
# The OpenAPI 3.0 subset `parameters` (a Schema) accepts.
_SCHEMA_KEYS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
}
_GENERATION_KEYS = {
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "enableEnhancedCivicAnswers",
    "speechConfig",
    "thinkingConfig",
    "mediaResolution",
}
_THINKING_KEYS = {"thinkingBudget", "includeThoughts", "thinkingLevel"}
_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
_CHAT_METHODS = ["generateContent", "countTokens", "createCachedContent", "batchGenerateContent"]
_EMBED_METHODS = ["embedContent", "countTextTokens", "countTokens"]


class Invalid(Exception):
    """A request the real API refuses with 400 INVALID_ARGUMENT."""


def error_response(status: int, message: str, details: list[dict] | None = None) -> web.Response:
    error: dict[str, Any] = {"code": status, "message": message, "status": STATUS.get(status, "UNKNOWN")}
    if details:
        error["details"] = details
    return web.Response(status=status, body=orjson.dumps({"error": error}), headers=JSON_HEADERS)


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), headers=JSON_HEADERS)


def _unknown(key: str, where: str) -> Invalid:
    return Invalid(f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field.")


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word.title() for word in rest)


def _keys(obj: Any, allowed: set[str], where: str) -> dict:
    """Check the field names of one message. Like Google's proto JSON parser it
    takes snake_case names too (the google-genai SDK sends some); they are
    renamed to camelCase in place, so the checks below read one spelling."""
    if not isinstance(obj, dict):
        raise Invalid(f"Invalid value at '{where}': expected an object.")
    for key in list(obj):
        if key in allowed:
            continue
        camel = _camel(key)
        if camel not in allowed or camel in obj:
            raise _unknown(key, where)
        obj[camel] = obj.pop(key)
    return obj


# ---------------------------------------------------------------------------
# request checks
# ---------------------------------------------------------------------------


def _check_part(part: Any, where: str) -> str:
    part = _keys(part, _PART_KEYS, where)
    kinds = [k for k in _DATA_KEYS if k in part]
    if len(kinds) != 1:
        raise Invalid(
            f"* GenerateContentRequest.{where}.data: required oneof field 'data' must have one initialized field"
            if not kinds
            else f"Invalid value at '{where}': more than one data field."
        )
    kind = kinds[0]
    value = part[kind]
    if kind == "text" and not isinstance(value, str):
        raise Invalid(f"Invalid value at '{where}.text' (TYPE_STRING).")
    if kind == "inlineData":
        _keys(value, {"mimeType", "data", "displayName"}, f"{where}.inline_data")
        try:
            base64.b64decode(value.get("data") or "", validate=True)
        except (binascii.Error, ValueError):
            raise Invalid(
                f"Invalid value at '{where}.inline_data.data' (TYPE_BYTES), Base64 decoding failed."
            ) from None
        if not value.get("mimeType"):
            raise Invalid(f"* GenerateContentRequest.{where}.inline_data.mime_type: mime_type is not specified.")
    if kind == "fileData":
        _keys(value, {"mimeType", "fileUri", "displayName"}, f"{where}.file_data")
        if not value.get("fileUri"):
            raise Invalid(f"* GenerateContentRequest.{where}.file_data.file_uri: file_uri is not specified.")
    if kind == "functionCall":
        _keys(value, {"id", "name", "args"}, f"{where}.function_call")
        if not isinstance(value.get("name"), str) or not value["name"]:
            raise Invalid(f"* GenerateContentRequest.{where}.function_call.name: name is not specified.")
        if "args" in value and not isinstance(value["args"], dict):
            raise Invalid(
                f"Invalid value at '{where}.function_call.args' (type.googleapis.com/google.protobuf.Struct)."
            )
    if kind == "functionResponse":
        _keys(value, {"id", "name", "response", "parts", "willContinue", "scheduling"}, f"{where}.function_response")
        if not isinstance(value.get("name"), str) or not value["name"]:
            raise Invalid(f"* GenerateContentRequest.{where}.function_response.name: name is not specified.")
        if not isinstance(value.get("response"), dict):
            raise Invalid(
                f"Invalid value at '{where}.function_response.response' (type.googleapis.com/google.protobuf.Struct)."
            )
    if "thoughtSignature" in part:
        signature = part["thoughtSignature"]
        if not isinstance(signature, str) or not re.fullmatch(r"[A-Za-z0-9+/_=-]*", signature):
            raise Invalid(f"Invalid value at '{where}.thought_signature' (TYPE_BYTES), Base64 decoding failed.")
    return kind


def _check_contents(contents: Any) -> None:
    if not isinstance(contents, list) or not contents:
        raise Invalid("* GenerateContentRequest.contents: contents is not specified")
    previous_calls: list[str] | None = None
    previous_role = None
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        content = _keys(content, {"role", "parts"}, where)
        role = content.get("role")
        if role not in ("user", "model"):
            raise Invalid("Please use a valid role: user, model.")
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            raise Invalid(f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty.")
        kinds = [_check_part(p, f"{where}.parts[{j}]") for j, p in enumerate(parts)]
        calls = [p["functionCall"]["name"] for p, k in zip(parts, kinds, strict=True) if k == "functionCall"]
        answers = [p["functionResponse"]["name"] for p, k in zip(parts, kinds, strict=True) if k == "functionResponse"]
        if calls and (role != "model" or previous_role == "model"):
            raise Invalid(
                "Please ensure that function call turn comes immediately after a user turn or after a "
                "function response turn."
            )
        if answers:
            if role != "user" or not previous_calls:
                raise Invalid("Please ensure that function response turn comes immediately after a function call turn.")
            if sorted(answers) != sorted(previous_calls):
                raise Invalid(
                    "Please ensure that the number of function response parts is equal to the number of "
                    "function call parts of the function call turn."
                )
        previous_calls = calls
        previous_role = role


def _check_schema(schema: Any, where: str) -> None:
    schema = _keys(schema, _SCHEMA_KEYS, where)
    for key in ("properties",):
        for name, sub in (schema.get(key) or {}).items():
            _check_schema(sub, f"{where}.properties[{name}]")
    if "items" in schema:
        _check_schema(schema["items"], f"{where}.items")
    for k, sub in enumerate(schema.get("anyOf") or ()):
        _check_schema(sub, f"{where}.any_of[{k}]")


def _check_tools(tools: Any, tool_config: Any) -> list[dict]:
    declarations: list[dict] = []
    if tools is not None:
        if not isinstance(tools, list):
            raise Invalid("Invalid value at 'tools': expected a list.")
        for i, tool in enumerate(tools):
            tool = _keys(tool, _TOOL_KEYS, f"tools[{i}]")
            for j, fn in enumerate(tool.get("functionDeclarations") or ()):
                where = f"tools[{i}].function_declarations[{j}]"
                fn = _keys(fn, _DECLARATION_KEYS, where)
                if not isinstance(fn.get("name"), str) or not _FUNCTION_NAME.match(fn["name"]):
                    raise Invalid(f"* GenerateContentRequest.{where}.name: Invalid function name.")
                if "parameters" in fn and "parametersJsonSchema" in fn:
                    raise Invalid(
                        f"* GenerateContentRequest.{where}: parameters and parameters_json_schema cannot both be set."
                    )
                if "parameters" in fn:
                    _check_schema(fn["parameters"], f"{where}.parameters")
                elif "parametersJsonSchema" in fn and not isinstance(fn["parametersJsonSchema"], dict):
                    raise Invalid(f"Invalid value at '{where}.parameters_json_schema'.")
                declarations.append(fn)
    if tool_config is not None:
        config = _keys(tool_config, {"functionCallingConfig", "retrievalConfig"}, "tool_config")
        fcc = _keys(
            config.get("functionCallingConfig") or {},
            {"mode", "allowedFunctionNames"},
            "tool_config.function_calling_config",
        )
        mode = fcc.get("mode", "AUTO")
        if mode not in ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"):
            raise Invalid(
                f"Invalid value at 'tool_config.function_calling_config.mode' (type.googleapis.com/"
                f'google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), "{mode}"'
            )
        allowed = fcc.get("allowedFunctionNames")
        if allowed is not None:
            if mode not in ("ANY", "VALIDATED"):
                raise Invalid(
                    "* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names:"
                    " allowed_function_names is only allowed when the mode is ANY or VALIDATED."
                )
            known = {d["name"] for d in declarations}
            for name in allowed:
                if name not in known:
                    raise Invalid(
                        f"* GenerateContentRequest.tool_config.function_calling_config."
                        f"allowed_function_names: function {name!r} is not declared."
                    )
    return declarations


def _check_generation(config: Any) -> dict:
    if config is None:
        return {}
    config = _keys(config, _GENERATION_KEYS, "generation_config")
    if "thinkingConfig" in config:
        _keys(config["thinkingConfig"], _THINKING_KEYS, "generation_config.thinking_config")
    count = config.get("candidateCount", 1)
    if not isinstance(count, int) or not 1 <= count <= 8:
        raise Invalid("* GenerateContentRequest.generation_config.candidate_count: must be between 1 and 8.")
    if "responseSchema" in config and "responseJsonSchema" in config:
        raise Invalid(
            "* GenerateContentRequest.generation_config: response_schema and response_json_schema cannot both be set."
        )
    if ("responseSchema" in config or "responseJsonSchema" in config) and config.get("responseMimeType") not in (
        "application/json",
        "text/x.enum",
    ):
        raise Invalid(
            "* GenerateContentRequest.generation_config.response_mime_type: a response schema needs "
            "response_mime_type application/json."
        )
    if "responseSchema" in config:
        _check_schema(config["responseSchema"], "generation_config.response_schema")
    return config


def check_generate(data: Any) -> None:
    """Everything the real API checks that this fake can tell (raises `Invalid`)."""
    data = _keys(data, _REQUEST_KEYS, "")
    _check_contents(data.get("contents"))
    if "systemInstruction" in data:
        system = _keys(data["systemInstruction"], {"role", "parts"}, "system_instruction")
        for j, part in enumerate(system.get("parts") or ()):
            _check_part(part, f"system_instruction.parts[{j}]")
    _check_tools(data.get("tools"), data.get("toolConfig"))
    _check_generation(data.get("generationConfig"))


# ---------------------------------------------------------------------------
# the fake
# ---------------------------------------------------------------------------


def _texts(parts: Any) -> list[str]:
    return [p["text"] for p in parts or () if isinstance(p, dict) and isinstance(p.get("text"), str)]


class _GeminiFake:
    def __init__(
        self, name: str, models: list[str], behavior: Behavior, requests: list[Recorded] | None, api_key: str
    ) -> None:
        self.name = name
        self.models = [m.removeprefix("models/") for m in models]
        self.behavior = behavior
        self.api_key = api_key
        self.faults = Faults(behavior, requests, error_response)
        self.ids = IdGen()

    # -- catalogue ----------------------------------------------------------------

    @staticmethod
    def _methods(model: str) -> list[str]:
        return _EMBED_METHODS if "embedding" in model else _CHAT_METHODS

    def _entry(self, model: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": f"models/{model}",
            "version": "001",
            "displayName": model.replace("-", " ").title(),
            "description": f"{model}, served by the fake Gemini API {self.name}",
            "inputTokenLimit": 1048576 if "embedding" not in model else 2048,
            "outputTokenLimit": 65536 if "embedding" not in model else 1,
            "supportedGenerationMethods": self._methods(model),
        }
        if "embedding" not in model:
            entry.update(temperature=1, topP=0.95, topK=64, maxTemperature=2, thinking=True)
        return entry

    def _auth(self, request: web.Request) -> web.Response | None:
        if "key" in request.query:
            return error_response(400, "This fake refuses API keys in the URL; send x-goog-api-key.")
        key = request.headers.get("x-goog-api-key")
        if not key:
            return error_response(
                403,
                "Method doesn't allow unregistered callers (callers without established identity). "
                "Please use API Key or other form of API consumer identity to call this API.",
            )
        if key != self.api_key:
            return error_response(
                400,
                "API key not valid. Please pass a valid API key.",
                [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                        "domain": "googleapis.com",
                        "metadata": {"service": "generativelanguage.googleapis.com"},
                    },
                ],
            )
        return None

    def _version(self, request: web.Request) -> web.Response | None:
        if request.match_info["version"] not in ("v1beta", "v1"):
            return error_response(404, f"Unknown API version {request.match_info['version']!r}.")
        return None

    async def list_models(self, request: web.Request) -> web.Response:
        err = self._version(request) or self._auth(request)
        if err is not None:
            return err
        try:
            size = int(request.query.get("pageSize", "50"))
            start = int(request.query.get("pageToken") or "0")
        except ValueError:
            return error_response(400, "Invalid value at 'page_size' or 'page_token'.")
        size = max(1, min(size, 1000))
        page = self.models[start : start + size]
        body: dict[str, Any] = {"models": [self._entry(m) for m in page]}
        if start + size < len(self.models):
            body["nextPageToken"] = str(start + size)
        return _json(body)

    async def get_model(self, request: web.Request) -> web.Response:
        err = self._version(request) or self._auth(request)
        if err is not None:
            return err
        model = request.match_info["model"]
        if model not in self.models:
            return error_response(404, f"models/{model} is not found for API version {request.match_info['version']}.")
        return _json(self._entry(model))

    # -- POST models/{m}:{method} -----------------------------------------------------

    async def post(self, request: web.Request) -> web.StreamResponse:
        body, data, err = await self.faults.begin(request)
        if err is not None:
            return err
        err = self._version(request) or self._auth(request)
        if err is not None:
            return err
        model, sep, method = request.match_info["call"].rpartition(":")
        version = request.match_info["version"]
        if not sep:
            return error_response(404, f"Unknown method for models/{model}.")
        # streamGenerateContent goes with generateContent, batchEmbedContents with embedContent.
        base = {"streamGenerateContent": "generateContent", "batchEmbedContents": "embedContent"}.get(method, method)
        if model not in self.models or base not in self._methods(model):
            return error_response(
                404,
                f"models/{model} is not found for API version {version}, or is not "
                f"supported for {method}. Call ListModels to see the list of available "
                "models and their supported methods.",
            )
        if not isinstance(data, dict):
            return error_response(400, "Invalid JSON payload received. Expected an object.")
        data = orjson.loads(body)  # a copy: the checks rename snake_case keys, the record stays as sent
        try:
            if method == "generateContent":
                check_generate(data)
                return _json(self._generate(model, data))
            if method == "streamGenerateContent":
                check_generate(data)
                return await self._stream(request, model, data)
            if method == "countTokens":
                return _json(self._count(model, data))
            if method == "embedContent":
                return _json({"embedding": self._embed_one(model, data, "")})
            if method == "batchEmbedContents":
                return _json(self._embed_batch(model, data))
        except Invalid as exc:
            return error_response(400, str(exc))
        return error_response(404, f"Unknown method {method!r}.")

    # -- generation ---------------------------------------------------------------------

    def _plan(self, model: str, data: dict) -> dict[str, Any]:
        """What to answer: the parts of each candidate, the finish, the usage."""
        contents = data["contents"]
        last = contents[-1]
        last_text = " ".join(_texts(last["parts"])) if last["role"] == "user" else ""
        answered_tool = any("functionResponse" in p for p in last["parts"])
        config = data.get("generationConfig") or {}
        prompt = count_tokens(
            *(t for c in contents for t in _texts(c["parts"])),
            *_texts((data.get("systemInstruction") or {}).get("parts")),
        )
        thinking = config.get("thinkingConfig") or {}
        thoughts = 7 if isinstance(thinking.get("thinkingBudget"), int) and thinking["thinkingBudget"] > 0 else 0
        plan: dict[str, Any] = {
            "prompt": prompt,
            "thoughts": thoughts,
            "blocked": None,
            "count": config.get("candidateCount", 1),
        }
        if "blocked-prompt" in last_text:
            plan["blocked"] = "SAFETY"
            return plan
        if "unsafe-reply" in last_text:
            plan.update(pieces=[], calls=None, finish="SAFETY")
            return plan
        call = None if answered_tool else self._pick_tool(data, last_text)
        if call is not None:
            plan.update(pieces=[], calls=[call], finish="STOP")
            return plan
        n = self.behavior.chunks
        if config.get("responseMimeType") == "application/json":
            text = "".join(reply_pieces(self.name, 8))
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            obj = schema_example(schema, text) if isinstance(schema, dict) else {"reply": text}
            pieces = split_text(orjson.dumps(obj).decode(), n)
        else:
            pieces = list(reply_pieces(self.name, n))
        limit = config.get("maxOutputTokens")
        finish = "STOP"
        if isinstance(limit, int) and 0 <= limit <= len(pieces):
            pieces, finish = pieces[:limit], "MAX_TOKENS"
        thought = f"The user wants a reply from {self.name}." if thinking.get("includeThoughts") else None
        plan.update(pieces=pieces, calls=None, finish=finish, thought=thought)
        return plan

    @staticmethod
    def _pick_tool(data: dict, text: str) -> dict | None:
        fns = [fn for tool in data.get("tools") or () for fn in tool.get("functionDeclarations") or ()]
        if not fns:
            return None
        fcc = (data.get("toolConfig") or {}).get("functionCallingConfig") or {}
        mode = fcc.get("mode", "AUTO")
        if mode == "NONE" or (mode not in ("ANY", "VALIDATED") and "weather" not in text.lower()):
            return None
        allowed = fcc.get("allowedFunctionNames")
        if allowed:
            fns = [fn for fn in fns if fn["name"] in allowed]
        fn = next((f for f in fns if "weather" in f["name"].lower()), fns[0])
        schema = fn.get("parametersJsonSchema", fn.get("parameters"))
        return {"name": fn["name"], "args": tool_arguments(schema)}

    def _usage(self, plan: dict, pieces: int | None = None) -> dict[str, Any]:
        prompt = plan["prompt"]
        meta: dict[str, Any] = {"promptTokenCount": prompt}
        if plan.get("blocked") is None:
            done = len(plan["pieces"]) if pieces is None else pieces
            calls = count_tokens(orjson.dumps(plan["calls"]).decode()) if plan.get("calls") else 0
            candidates = (done + calls) * plan["count"]
            if candidates:
                meta["candidatesTokenCount"] = candidates
            total = prompt + candidates + plan["thoughts"]
            if plan["thoughts"]:
                meta["thoughtsTokenCount"] = plan["thoughts"]
        else:
            total = prompt
        meta["totalTokenCount"] = total
        meta["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
        return meta

    def _candidate(self, index: int, parts: list[dict], finish: str | None) -> dict[str, Any]:
        candidate: dict[str, Any] = {}
        if parts:
            candidate["content"] = {"parts": parts, "role": "model"}
        if finish is not None:
            candidate["finishReason"] = finish
            if finish == "SAFETY":
                candidate["safetyRatings"] = [
                    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
                ]
        candidate["index"] = index
        return candidate

    @staticmethod
    def _call_parts(calls: list[dict]) -> list[dict]:
        parts: list[dict] = []
        for call in calls:
            part: dict[str, Any] = {"functionCall": call}
            if not parts:
                part["thoughtSignature"] = THOUGHT_SIGNATURE
            parts.append(part)
        return parts

    def _blocked(self, model: str, plan: dict, response_id: str) -> dict[str, Any]:
        return {
            "promptFeedback": {
                "blockReason": plan["blocked"],
                "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}],
            },
            "usageMetadata": self._usage(plan),
            "modelVersion": model,
            "responseId": response_id,
        }

    def _generate(self, model: str, data: dict) -> dict[str, Any]:
        plan = self._plan(model, data)
        response_id = self.ids("resp")
        if plan["blocked"]:
            return self._blocked(model, plan, response_id)
        parts: list[dict] = []
        if plan.get("thought"):
            parts.append({"text": plan["thought"], "thought": True})
        if plan["calls"]:
            parts += self._call_parts(plan["calls"])
        elif plan["pieces"]:
            parts.append({"text": "".join(plan["pieces"])})
        return {
            "candidates": [self._candidate(i, parts, plan["finish"]) for i in range(plan["count"])],
            "usageMetadata": self._usage(plan),
            "modelVersion": model,
            "responseId": response_id,
        }

    async def _stream(self, request: web.Request, model: str, data: dict) -> web.StreamResponse:
        plan = self._plan(model, data)
        response_id = self.ids("resp")
        sse = request.query.get("alt") == "sse"
        w = StreamWriter(web.StreamResponse(headers=SSE_HEADERS if sse else JSON_HEADERS), request, self.behavior)
        await w.start()
        frames: list[dict] = []
        if plan["blocked"]:
            frames.append(self._blocked(model, plan, response_id))
        else:
            steps: list[list[dict]] = []
            if plan.get("thought"):
                steps += [[{"text": part, "thought": True}] for part in split_text(plan["thought"], 2)]
            if plan["calls"]:
                steps.append(self._call_parts(plan["calls"]))
            steps += [[{"text": piece}] for piece in plan["pieces"]]
            steps = steps or [[]]
            for k, parts in enumerate(steps):
                last = k == len(steps) - 1
                frames.append(
                    {
                        "candidates": [
                            self._candidate(i, parts, plan["finish"] if last else None) for i in range(plan["count"])
                        ],
                        "usageMetadata": self._usage(plan, None if last else 0),
                        "modelVersion": model,
                        "responseId": response_id,
                    }
                )
        for k, frame in enumerate(frames):
            if sse:
                await w.send(b"data: " + orjson.dumps(frame) + b"\r\n\r\n")
            else:  # a JSON array, streamed element by element
                await w.send(
                    (b"[" if k == 0 else b",\r\n") + orjson.dumps(frame) + (b"]" if k == len(frames) - 1 else b"")
                )
        return await w.finish()

    # -- counting, embedding -----------------------------------------------------------------

    def _count(self, model: str, data: dict) -> dict[str, Any]:
        _keys(data, {"contents", "generateContentRequest"}, "")
        if ("contents" in data) == ("generateContentRequest" in data):
            raise Invalid("* CountTokensRequest: exactly one of contents and generate_content_request must be set.")
        if "contents" in data:
            _check_contents(data["contents"])
            texts = [t for c in data["contents"] for t in _texts(c["parts"])]
        else:
            inner = data["generateContentRequest"]
            if not isinstance(inner, dict) or inner.get("model") != f"models/{model}":
                raise Invalid(
                    "* CountTokensRequest.generate_content_request.model: must be the model of the "
                    f"request, models/{model}."
                )
            check_generate(inner)
            texts = [t for c in inner["contents"] for t in _texts(c["parts"])]
            texts += _texts((inner.get("systemInstruction") or {}).get("parts"))
            texts += [orjson.dumps(t).decode() for t in inner.get("tools") or ()]
        return {"totalTokens": count_tokens(*texts)}

    def _embed_one(self, model: str, data: Any, where: str) -> dict[str, Any]:
        data = _keys(data, {"model", "content", "taskType", "title", "outputDimensionality"}, where or "")
        if "model" in data and data["model"] != f"models/{model}":
            raise Invalid(f"* BatchEmbedContentsRequest.{where}.model: the model must be models/{model}.")
        content = _keys(data.get("content"), {"role", "parts"}, f"{where}.content".lstrip("."))
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            raise Invalid("* EmbedContentRequest.content: content.parts must not be empty.")
        for j, part in enumerate(parts):
            if _check_part(part, f"content.parts[{j}]") != "text":
                raise Invalid("* EmbedContentRequest.content: only text can be embedded.")
        dims = data.get("outputDimensionality", 8)
        if not isinstance(dims, int) or dims < 1:
            raise Invalid("* EmbedContentRequest.output_dimensionality: must be positive.")
        return {"values": embedding_vector(" ".join(_texts(parts)), dims)}

    def _embed_batch(self, model: str, data: dict) -> dict[str, Any]:
        _keys(data, {"requests"}, "")
        requests = data.get("requests")
        if not isinstance(requests, list) or not requests:
            raise Invalid("* BatchEmbedContentsRequest.requests: requests is not specified.")
        out = []
        for i, req in enumerate(requests):
            if not isinstance(req, dict) or req.get("model") != f"models/{model}":
                raise Invalid(f"* BatchEmbedContentsRequest.requests[{i}].model: the model must be models/{model}.")
            out.append(self._embed_one(model, req, f"requests[{i}]"))
        return {"embeddings": out}


def make_app(
    name: str,
    models: list[str],
    behavior: Behavior | None = None,
    requests: list[Recorded] | None = None,
    api_key: str = FAKE_API_KEY,
) -> web.Application:
    """The fake Gemini API.  `requests=None` records nothing."""
    fake = _GeminiFake(name, models, behavior if behavior is not None else Behavior(), requests, api_key)
    app = web.Application(client_max_size=MAX_BODY, middlewares=fake.faults.middlewares)

    async def add_name(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-backend-name"] = name

    app.on_response_prepare.append(add_name)
    app[FAKE_KEY] = fake
    r = app.router
    r.add_get("/{version}/models", fake.list_models)
    r.add_get("/{version}/models/{model}", fake.get_model)
    r.add_post("/{version}/models/{call}", fake.post)
    return app


def server_thread(
    name: str = "demo-gemini",
    models: list[str] | tuple[str, ...] = ("gemini-2.5-flash", "gemini-embedding-001"),
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    behavior: Behavior | None = None,
) -> ServerThread:
    """A (not yet started) `ServerThread` serving this fake; use `with` or `.start()`."""
    return thread_for(make_app, name, models, port=port, host=host, behavior=behavior)


def main(argv: list[str] | None = None) -> None:
    cli(
        make_app,
        argv,
        prog="python -m fakes.gemini_backend",
        what="fake Gemini API",
        port=8300,
        name="demo-gemini",
        models="gemini-2.5-flash,gemini-embedding-001",
    )


if __name__ == "__main__":
    main()
