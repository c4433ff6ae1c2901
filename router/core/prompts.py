"""Global prompts: the operator's system prompt merged into every chat request.

Pure: no Django, no I/O. The policy is compiled into the snapshot from the
`global_prompts` section (file contents already read by the config writer);
`merge_*` take a request body and return a new one, never changing theirs.

Which prompt a request gets: the selected backend's override, else its
model's (the name routed to, a fallback hop's own), else the default. An
override names its own text (or file) and/or mode, and takes what it leaves
out from the default; an override whose text is empty sends none.

What `mode` does to the client's own system prompt (chat: its `system` and
`developer` messages; Responses: `instructions`; Anthropic: `system`):

- `prepend`: the prompt goes before it, in the same system message when the
  conversation opens with one (chat templates that take a single leading
  system message keep working), else as a new leading system message;
- `append`: after it, likewise;
- `replace`: the client's system prompt is dropped and the prompt alone is
  the system message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MODES = ("prepend", "append", "replace")
DEFAULT_MODE = "prepend"
SEPARATOR = "\n\n"  # between the prompt and the client's own system text
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    mode: str  # one of MODES
    source: str  # "default" | "model" | "backend": which entry decided it


@dataclass(frozen=True, slots=True)
class PromptPolicy:
    """What each request gets; None in a table means "no prompt" for that name."""

    default: Prompt | None = None
    models: Mapping[str, Prompt | None] = field(default_factory=dict)
    backends: Mapping[str, Prompt | None] = field(default_factory=dict)

    def pick(self, model: str, backend: str) -> Prompt | None:
        backends = self.backends
        if backend in backends:
            return backends[backend]
        models = self.models
        if model in models:
            return models[model]
        return self.default


def merge_chat(body: Mapping[str, Any], prompt: Prompt) -> dict[str, Any]:
    """A Chat Completions body with `prompt` merged into its `messages`."""
    messages = body.get("messages")
    messages = list(messages) if isinstance(messages, list) else []
    if prompt.mode == "replace":
        kept = [m for m in messages if not (isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES)]
        return {**body, "messages": [{"role": "system", "content": prompt.text}, *kept]}
    first = messages[0] if messages else None
    if isinstance(first, dict) and first.get("role") in _SYSTEM_ROLES:
        content = _merged_content(first.get("content"), prompt)
        if content is not None:
            return {**body, "messages": [{**first, "content": content}, *messages[1:]]}
    return {**body, "messages": [{"role": "system", "content": prompt.text}, *messages]}


def _merged_content(content: Any, prompt: Prompt) -> Any:
    """A system message's content with the prompt before or after it; None
    when the content is of a shape the prompt cannot join (a message of its
    own is added then)."""
    if isinstance(content, str):
        if not content:
            return prompt.text
        return prompt.text + SEPARATOR + content if prompt.mode == "prepend" else content + SEPARATOR + prompt.text
    if isinstance(content, list):
        part = {"type": "text", "text": prompt.text}
        return [part, *content] if prompt.mode == "prepend" else [*content, part]
    return None


def merge_responses(body: Mapping[str, Any], prompt: Prompt) -> dict[str, Any]:
    """A Responses body with `prompt` merged into its `instructions` (for
    `replace`, system and developer items of `input` are dropped too)."""
    out = dict(body)
    instructions = body.get("instructions")
    if prompt.mode == "replace" or not isinstance(instructions, str) or not instructions:
        out["instructions"] = prompt.text
    elif prompt.mode == "prepend":
        out["instructions"] = prompt.text + SEPARATOR + instructions
    else:
        out["instructions"] = instructions + SEPARATOR + prompt.text
    items = body.get("input")
    if prompt.mode == "replace" and isinstance(items, list):
        out["input"] = [i for i in items if not (isinstance(i, dict) and i.get("role") in _SYSTEM_ROLES)]
    return out


def merge_anthropic(body: Mapping[str, Any], prompt: Prompt) -> dict[str, Any]:
    """An Anthropic Messages body with `prompt` merged into its `system`
    (a string, or a list of text blocks whose cache_control marks are kept)."""
    system = body.get("system")
    if prompt.mode == "replace" or not system:
        return {**body, "system": prompt.text}
    if isinstance(system, str):
        merged: Any = prompt.text + SEPARATOR + system if prompt.mode == "prepend" else system + SEPARATOR + prompt.text
    elif isinstance(system, list):
        block = {"type": "text", "text": prompt.text}
        merged = [block, *system] if prompt.mode == "prepend" else [*system, block]
    else:
        merged = prompt.text
    return {**body, "system": merged}
