"""The `global_prompts` section: its files, its compiled policy, and the
request it changes (the pure merges are `router.core.prompts`).

Files: a prompt given as `file:` is read by the process that applies the
YAML (`services.config_sync`) and its text is stored with the applied
document under `PROMPT_FILES`, a key no YAML may hold (the schema refuses it
as unknown). Every web process gets the text through its snapshot, never by
reading a file, let alone per request; the writer's file watch looks at the
prompt files as it looks at the YAML (node/config_watch.py), so editing one
is applied like editing the YAML: a file that cannot be read, is not UTF-8
or is larger than `MAX_PROMPT_BYTES` is refused and the previous state keeps
serving.

Requests: `applied()` runs once per attempt on the request as the client
sent it, so a retry or a fallback hop never gets the prompt twice; it
merges into chat requests (either door: the Anthropic door's own body too,
which an Anthropic backend is sent as is) and Responses requests, and
notes in the observation what it applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from .config_schema import ConfigError, GlobalPromptsConfig
from .core.prompts import DEFAULT_MODE, Prompt, PromptPolicy, merge_anthropic, merge_chat, merge_responses
from .request import Envelope

PROMPT_FILES = "_prompt_files"  # the document key of the files' texts (by the name the YAML gives)
MAX_PROMPT_BYTES = 1024 * 1024


def file_path(config_path: Path, name: str) -> Path:
    """A prompt file's path: as given, or relative to the YAML's directory."""
    path = Path(name).expanduser()
    return path if path.is_absolute() else config_path.parent / path


def read_files(config_path: Path, section: GlobalPromptsConfig) -> dict[str, str]:
    """The text of every prompt file the section names (ConfigError naming the key)."""
    out: dict[str, str] = {}
    for where, entry in section.entries():
        if entry.file is not None and entry.file not in out:
            out[entry.file] = _read(config_path, entry.file, where)
    return out


def _read(config_path: Path, name: str, where: str) -> str:
    path = file_path(config_path, name)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_PROMPT_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{config_path}: {where}.file: cannot read {path} ({exc.strerror or exc})") from None
    if len(data) > MAX_PROMPT_BYTES:
        raise ConfigError(f"{config_path}: {where}.file: {path} is larger than {MAX_PROMPT_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{config_path}: {where}.file: {path} is not UTF-8 text ({exc.reason})") from None
    return text.replace("\r\n", "\n").rstrip("\n")  # an editor's last line end is not part of the prompt


def files_current(config_path: Path, files: Mapping[str, str]) -> bool:
    """Whether the files still hold the texts the mirror has."""
    try:
        return all(_read(config_path, name, "global_prompts") == text for name, text in files.items())
    except ConfigError:
        return False


def watched(config_path: Path, files: Mapping[str, str]) -> tuple[Path, ...]:
    return tuple(sorted({file_path(config_path, name) for name in files}))


def fill(section: GlobalPromptsConfig, files: Mapping[str, str]) -> None:
    """Give each file entry of a section read from the mirror its file's
    text (a section the reader just validated, shared with no one)."""
    for _, entry in section.entries():
        if entry.file is not None:
            entry.text = files.get(entry.file, "")


def policy(section: GlobalPromptsConfig) -> PromptPolicy | None:
    """The snapshot's policy from a `fill`ed section (None: no prompt
    anywhere). An override takes the default's text and mode where it names none."""
    base_text = section.text or ""
    base_mode = section.mode or DEFAULT_MODE

    def entry(config: Any, source: str) -> Prompt | None:
        text = base_text if config.text is None else config.text
        return Prompt(text, config.mode or base_mode, source) if text else None

    default = Prompt(base_text, base_mode, "default") if base_text else None
    models = {name: entry(config, f"model {name}") for name, config in section.models.items()}
    backends = {name: entry(config, f"backend {name}") for name, config in section.backends.items()}
    if default is None and not any(models.values()) and not any(backends.values()):
        return None
    return PromptPolicy(default=default, models=models, backends=backends)


def applied(env: Envelope, prompts: PromptPolicy | None, model: str, backend: str, obs: dict[str, Any]) -> Envelope:
    """`env` with the prompt of (`model`, `backend`) merged in; `env` itself
    when none applies. Call it with the client's envelope on every attempt."""
    if prompts is None or env.endpoint not in ("chat/completions", "responses"):
        return env
    prompt = prompts.pick(model, backend)
    if prompt is None:
        obs.pop("global_prompt", None)
        obs.pop("global_prompt_from", None)
        return env
    notes = env.notes
    if env.endpoint == "responses":
        body = merge_responses(env.body, prompt)
    else:
        body = merge_chat(env.body, prompt)
        own = notes.get("anthropic_request")
        if isinstance(own, dict):
            notes = {**notes, "anthropic_request": merge_anthropic(own, prompt)}
    obs["global_prompt"] = prompt.mode
    obs["global_prompt_from"] = prompt.source
    return dataclasses.replace(env, body=body, raw=orjson.dumps(body), notes=notes)
