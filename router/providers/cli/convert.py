"""Chat Completions body → the command's prompt and argv; its output → OpenAI shapes.

Pure: no Django, no I/O, no asyncio. Every request field is handled, ignored
(named in `Prompt.ignored_fields` with a note) or rejected with
`UnsupportedParameter` before anything runs. docs/providers/cli.md renders
`CHAT_POLICY` and the rendering rules below.

Rendering (the prompt the command gets):
- one user message: its text, exactly;
- otherwise each message as `<Role>: <text>` (System, User, Assistant; a
  developer message is a System one), blocks joined by one blank line;
- a message's text is its string content, or its text parts joined with no
  separator. Nothing is added (no trailing newline, no "Assistant:" cue).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from router.core.backend import CliSpec
from router.core.errors import InvalidRequest, UnsupportedParameter

# field → (policy, note). converted/conditional ones are handled in code.
CHAT_POLICY: dict[str, tuple[str, str]] = {
    "model": ("converted", "the served model name replaces {model} in the argv"),
    "messages": ("converted", "rendered as the plain-text prompt (system/developer/user/assistant)"),
    "stream": ("converted", "stdout relayed line by line as content deltas"),
    "stream_options": ("converted", "include_usage adds the trailing (estimated) usage chunk"),
    "n": ("conditional", "1 only; a command gives one answer"),
    "logprobs": ("conditional", "false only; a command gives no log probabilities"),
    "modalities": ("conditional", "['text'] only"),
    "response_format": ("conditional", "text only; a command cannot be held to a JSON format"),
    "tools": ("conditional", "an empty list only; a command cannot call tools"),
    "tool_choice": ("conditional", "none or auto (with no tools) only"),
    "audio": ("unsupported", "audio output needs an audio model"),
    "functions": ("unsupported", "a command cannot call functions"),
    "function_call": ("unsupported", "a command cannot call functions"),
    "web_search_options": ("unsupported", "no hosted web search"),
    "prediction": ("ignored", "predicted outputs only speed up generation"),
    "top_logprobs": ("ignored", "log probabilities are not returned"),
    "temperature": ("ignored", "a command has no sampling options"),
    "top_p": ("ignored", "a command has no sampling options"),
    "seed": ("ignored", "a command has no sampling options"),
    "frequency_penalty": ("ignored", "a command has no sampling options"),
    "presence_penalty": ("ignored", "a command has no sampling options"),
    "logit_bias": ("ignored", "a command has no sampling options"),
    "stop": ("ignored", "the command's whole output is the answer"),
    "max_tokens": ("ignored", "the command decides its length; bounded by cli.timeout"),
    "max_completion_tokens": ("ignored", "the command decides its length; bounded by cli.timeout"),
    "reasoning_effort": ("ignored", "not passed to the command"),
    "verbosity": ("ignored", "not passed to the command"),
    "parallel_tool_calls": ("ignored", "no tools"),
    "user": ("ignored", "not passed to the command"),
    "safety_identifier": ("ignored", "not passed to the command"),
    "prompt_cache_key": ("ignored", "not passed to the command"),
    "prompt_cache_retention": ("ignored", "not passed to the command"),
    "metadata": ("ignored", "not passed to the command"),
    "store": ("ignored", "completions are not stored"),
    "service_tier": ("ignored", "no service tiers"),
}

ROLES = {"system": "System", "developer": "System", "user": "User", "assistant": "Assistant"}
CHARS_PER_TOKEN = 4  # the completion estimate, as router/providers/estimate.py


@dataclass(slots=True)
class Prompt:
    text: str
    ignored_fields: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _unsupported(key: str, why: str) -> UnsupportedParameter:
    return UnsupportedParameter(f"'{key}' is not supported by this model's provider (a command): {why}", param=key)


def _conditional(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise _unsupported("n", CHAT_POLICY["n"][1])
    if body.get("logprobs"):
        raise _unsupported("logprobs", CHAT_POLICY["logprobs"][1])
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise _unsupported("modalities", CHAT_POLICY["modalities"][1])
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise _unsupported("response_format", CHAT_POLICY["response_format"][1])
    if body.get("tools"):
        raise _unsupported("tools", CHAT_POLICY["tools"][1])
    choice = body.get("tool_choice")
    if choice is not None and choice not in ("none", "auto"):
        raise _unsupported("tool_choice", CHAT_POLICY["tool_choice"][1])


def _text(message: dict[str, Any], i: int) -> str:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(
            f"'messages[{i}].content' must be a string or an array of parts.", param=f"messages[{i}].content"
        )
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            raise _unsupported(f"messages[{i}].content[{j}]", f"only text parts are sent to a command, not {kind!r}")
        out.append(part["text"])
    return "".join(out)


def render(messages: list[dict[str, Any]]) -> str:
    """The prompt text of `messages` (rules in the module docstring)."""
    blocks: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise _unsupported(
                f"messages[{i}].role",
                f"{role!r} messages cannot be sent to a command (system, developer, user and assistant can)",
            )
        if message.get("tool_calls") or message.get("function_call"):
            raise _unsupported(f"messages[{i}].tool_calls", "a command cannot call tools")
        if message.get("audio"):
            raise _unsupported(f"messages[{i}].audio", "audio cannot be sent to a command")
        blocks.append((ROLES[role], _text(message, i)))
    if len(blocks) == 1 and messages[0].get("role") == "user":
        return blocks[0][1]
    return "\n\n".join(f"{role}: {text}" for role, text in blocks)


def chat_prompt(body: dict[str, Any]) -> Prompt:
    """The prompt of a Chat Completions body; raises before anything runs."""
    ignored: list[str] = []
    notes: list[str] = []
    for key, value in body.items():
        rule = CHAT_POLICY.get(key)
        if rule is None:
            ignored.append(key)
            notes.append(f"{key}: unknown field, not passed to the command")
            continue
        policy, why = rule
        if value is None:
            continue
        if policy == "unsupported":
            raise _unsupported(key, why)
        if policy == "ignored":
            ignored.append(key)
            notes.append(f"{key}: {why}")
    _conditional(body)
    if body.get("tool_choice") is not None:
        ignored.append("tool_choice")
        notes.append("tool_choice: no tools are sent")
    return Prompt(render(body["messages"]), ignored, notes)


def argv(cli: CliSpec, prompt: str, served: str) -> list[str]:
    """The command's argv: `{model}` → `served` in every item; with prompt
    "argument", `{prompt}` → the prompt (in one pass, so a prompt that holds
    `{model}` stays as typed)."""
    out = []
    for item in cli.command:
        if cli.prompt == "argument":
            pieces = item.split("{prompt}")
            out.append(prompt.join(piece.replace("{model}", served) for piece in pieces))
        else:
            out.append(item.replace("{model}", served))
    return out


def completion_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def usage(prompt_tokens: int, text: str) -> dict[str, int]:
    out = completion_tokens(text)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": out, "total_tokens": prompt_tokens + out}


def chat_completion(text: str, *, model: str, completion_id: str, created: int, prompt_tokens: int) -> dict:
    """The command's whole stdout → `chat.completion`."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage(prompt_tokens, text),
    }


def sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class ChatStream:
    """Lines of stdout → `chat.completion.chunk` events: the first carries the
    role, each line one content delta (its newline kept), then the finish
    chunk, the usage chunk (stream_options.include_usage) and `[DONE]`."""

    def __init__(
        self, *, model: str, completion_id: str, created: int, include_usage: bool, prompt_tokens: int
    ) -> None:
        self._head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        self._include_usage = include_usage
        self._prompt_tokens = prompt_tokens
        self._role_sent = False
        self._finished = False
        self._chars = 0
        self.usage: dict | None = None

    def _chunk(self, delta: dict, finish: str | None = None) -> bytes:
        chunk: dict = {
            **self._head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self._include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def line(self, text: str) -> list[bytes]:
        if not text:
            return []
        self._chars += len(text)
        delta: dict = {"content": text}
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **delta}
        return [self._chunk(delta)]

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        out = []
        if not self._role_sent:
            self._role_sent = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        out.append(self._chunk({}, "stop"))
        out_tokens = -(-self._chars // CHARS_PER_TOKEN)
        self.usage = {
            "prompt_tokens": self._prompt_tokens,
            "completion_tokens": out_tokens,
            "total_tokens": self._prompt_tokens + out_tokens,
        }
        if self._include_usage:
            out.append(sse({**self._head, "choices": [], "usage": self.usage}))
        out.append(b"data: [DONE]\n\n")
        return out

    def fail(self, error: Any) -> list[bytes]:
        """The one event that ends a stream which failed after its first byte."""
        if self._finished:
            return []
        self._finished = True
        return [error.to_sse()]
