"""The operator YAML: schema, `${ENV}` interpolation, errors that name the key.

Unknown keys are rejected with their YAML path (``backends[2].wieght``). The
schema is the single source of the IFACE contract; docs/configuration.md
mirrors it.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from . import extensions
from .core.ipnets import parse_networks
from .providers import COMMAND_KINDS, KINDS

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(Exception):
    """A config file problem; the message names the file, the key and a fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class CliConfig(_Strict):
    """`backends[N].cli`: the command a `kind: cli` backend runs (docs/providers/cli.md).

    Never through a shell: `command` is the argv itself. `{model}` in any item
    becomes the served model name; with `prompt: argument` the items holding
    `{prompt}` get the prompt (else it is written to stdin). The child sees
    only the variables named in `env` (plus a minimal PATH when PATH is not
    named); `cwd` defaults to the router's working directory.
    """

    command: list[str] = Field(min_length=1)
    prompt: Literal["stdin", "argument"] = "stdin"
    env: list[str] = Field(default_factory=list)
    cwd: str | None = None
    timeout: float = Field(default=300.0, gt=0, description="seconds for the whole run")

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("command[0] must name the program to run")
        if any("\0" in item for item in v):
            raise ValueError("an argv item cannot hold a NUL byte")
        return v

    @field_validator("env")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable name (list names, not NAME=value)")
        return v

    @model_validator(mode="after")
    def _placeholder(self) -> CliConfig:
        if self.prompt == "argument" and not any("{prompt}" in item for item in self.command):
            raise ValueError("prompt: argument needs an argv item holding {prompt}")
        return self


# What an HTTP upstream needs and a command backend has no use for.
_NOT_FOR_COMMANDS = frozenset({"api_key", "headers", "connect_timeout", "read_timeout", "discover_models"})


class BackendConfig(_Strict):
    name: str = Field(min_length=1, max_length=200)
    kind: str = "openai_compat"  # before url: the url's rule depends on it
    # Required (http/https) for every kind but a command one (cli), whose URL is cli://<name>.
    url: str = Field(default="", validate_default=True)
    models: list[str] = Field(default_factory=list)
    # Add the names the backend itself lists (GET /v1/models, or Ollama's
    # /api/tags) to `models`, refreshed by the health probe task.
    discover_models: bool = False
    served_model: str | None = None
    weight: int = Field(default=100, ge=1, le=1000)
    capacity: int | None = Field(default=None, ge=1)
    priority: int = 0
    api_key: str | None = None
    connect_timeout: float = Field(default=5.0, gt=0)
    read_timeout: float = Field(default=600.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    cli: CliConfig | None = None  # required when kind is cli, refused otherwise

    @field_validator("url")
    @classmethod
    def _url(cls, v: str, info: ValidationInfo) -> str:
        if info.data.get("kind") in COMMAND_KINDS:
            return v  # checked with its cli: section below
        if not v:
            raise ValueError("required: the backend's http:// or https:// URL")
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an http:// or https:// URL")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _command(self) -> BackendConfig:
        if self.kind in COMMAND_KINDS:
            if self.cli is None:
                raise ValueError("kind cli needs a cli: section with its command (see docs/providers/cli.md)")
            if not self.url:
                self.url = f"cli://{self.name}"
            elif self.url != f"cli://{self.name}":
                raise ValueError(f"url: a cli backend has no URL; leave it out (it is cli://{self.name})")
            unused = sorted(self.model_fields_set & _NOT_FOR_COMMANDS)
            if unused:
                raise ValueError(
                    f"{', '.join(unused)}: not used by a cli backend (it has no HTTP upstream; "
                    "its limit is cli.timeout, its variables cli.env)"
                )
            if self.capacity is None:
                self.capacity = 1  # one run at a time unless the operator says more
            return self
        if self.cli is not None:
            raise ValueError("cli: only a backend of kind cli runs a command")
        return self

    @model_validator(mode="after")
    def _has_models(self) -> BackendConfig:
        if not self.models and not self.discover_models:
            raise ValueError("models: list at least one model name, or set discover_models: true")
        return self

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in KINDS:
            raise ValueError(f"unknown kind {v!r}; one of: {', '.join(sorted(KINDS))}")
        return v


# The YAML key of a command kind's section (`cli:`), found by its type: the
# key is spelled as the kind, and kinds are named by the registry only.
COMMAND_SECTION = next(name for name, f in BackendConfig.model_fields.items() if f.annotation == CliConfig | None)


class HealthConfig(_Strict):
    enabled: bool = True
    interval: float = Field(default=10.0, gt=0)
    timeout: float = Field(default=2.0, gt=0)
    path: str = "/v1/models"
    unhealthy_threshold: int = Field(default=2, ge=1)
    healthy_threshold: int = Field(default=1, ge=1)
    failure_threshold: int = Field(default=3, ge=1, description="passive: failures that open the breaker")
    cooldown: float = Field(default=10.0, gt=0)


class RetryConfig(_Strict):
    max_attempts: int = Field(default=3, ge=1, le=10)
    backoff: float = Field(default=0.05, ge=0)
    retry_on_status: list[int] = Field(default_factory=lambda: [429, 500, 502, 503, 504])


class FallbackConfig(_Strict):
    fallback_chains: dict[str, list[str]] = Field(default_factory=dict)


class ApiKeysConfig(_Strict):
    mode: Literal["open", "blocking"] = "open"
    rate_limit_scope: Literal["node", "cluster"] = "node"


class QueueConfig(_Strict):
    max_wait: float = Field(default=10.0, ge=0, description="seconds a request waits for capacity")
    max_waiting: int = Field(default=1000, ge=0)


class ServerConfig(_Strict):
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_response_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies")
    @classmethod
    def _nets(cls, v: list[str]) -> list[str]:
        parse_networks(v, strict=True)
        return v


def _enabled(section: dict[str, Any] | None) -> bool:
    value = section.get("enabled") if isinstance(section, dict) else None
    if isinstance(value, str):
        return value.strip().lower() in {"true", "yes", "on", "1"}
    return value is True or value == 1


class RouterFile(_Strict):
    backends: list[BackendConfig] = Field(default_factory=list)
    selection_strategy: Literal["weighted_round_robin", "least_latency", "least_in_flight", "prefix_hash"] = (
        "weighted_round_robin"
    )
    health: HealthConfig = Field(default_factory=HealthConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    fallback: FallbackConfig = Field(default_factory=FallbackConfig)
    api_keys: ApiKeysConfig = Field(default_factory=ApiKeysConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    # Kept raw here and validated by the app that owns the section (the
    # appproxy app, seed §7 / §9.11), through router.extensions.
    appproxy: dict[str, Any] | None = None
    appproxy_router: dict[str, Any] | None = None

    @field_validator("appproxy", "appproxy_router")
    @classmethod
    def _owned_section(cls, v: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        validate = extensions.section_validator(str(info.field_name))
        if v is not None and validate is not None:
            validate(v)
        return v

    @model_validator(mode="after")
    def _one_appproxy_mode(self) -> RouterFile:
        # A node is either a legacy wildcard worker or a ROUTER worker (seed §9.11).
        if _enabled(self.appproxy) and _enabled(self.appproxy_router):
            raise ValueError(
                "appproxy.enabled and appproxy_router.enabled are both true: a node runs one AppProxy mode; "
                "set one of them to false (see docs/appproxy.md)"
            )
        return self

    @model_validator(mode="after")
    def _unique(self) -> RouterFile:
        _check_unique(self.backends)
        return self


def _check_unique(backends: list[BackendConfig]) -> None:
    seen: set[str] = set()
    for i, b in enumerate(backends):
        if b.name in seen:
            raise ValueError(f"backends[{i}].name: duplicate backend name {b.name!r}")
        seen.add(b.name)


# libyaml's safe loader when PyYAML was built with it (its wheels are): the
# same safe subset, about 4x less CPU than the pure-Python one on a large file.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def interpolate(value: Any, path: str = "") -> Any:
    """Replace ${VAR} from the environment; a missing variable is an error."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in os.environ:
                raise ConfigError(
                    f"{path or '<root>'}: environment variable {name} is not set "
                    f"(export {name}=… or remove the reference)"
                )
            return os.environ[name]

        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: interpolate(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def parse(text: str, *, source: str = "<config>", remember: bool = False) -> tuple[RouterFile, dict[str, Any]]:
    """Validate YAML text. Returns the model (interpolated) and the raw document
    (templates kept, so secrets are never stored). Treat both as read-only:
    with ``remember`` (the one writer that re-reads the file on every edit),
    the backends of a large file are kept for, and shared with, the next parse."""
    parsed = _CHUNKS.parse(text, remember=remember)
    if parsed is not None:
        return parsed
    return _parse_whole(text, source)


def _parse_whole(text: str, source: str) -> tuple[RouterFile, dict[str, Any]]:
    try:
        raw = yaml.load(text, Loader=_LOADER) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    try:
        resolved = interpolate(raw)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        model = RouterFile.model_validate(resolved)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = _loc(err["loc"])
            if err["type"] == "extra_forbidden":
                lines.append(f"{source}: {where}: unknown key (check the spelling; see docs/configuration.md)")
            else:
                lines.append(f"{source}: {where}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None
    return model, raw


# One remembered item: (raw item, parsed item, the ${VAR} values it was
# parsed with, its name).
_Item = tuple[Any, BackendConfig, tuple[tuple[str, str | None], ...], str]


class _BackendChunks:
    """Parse a large file's ``backends:`` list one item at a time, and keep
    each item's parse for the next time the file is read.

    At fleet size the file is a long block list under ``backends:`` and an
    edit changes one or two items. Each item's text (from its ``-`` to the
    next) is parsed and validated on its own and remembered by its text and
    the values of the ``${VAR}``s it names; the next parse of the file
    re-parses only items whose text changed, and hands back the very same
    objects for the rest (``config_sync`` then compares by identity).

    Only a file in the plain block form is split: one ``backends:`` line at
    column 0, items at one indentation, no anchors, aliases, tags, document
    markers, CR line ends or BOM. Anything else, any item that is not exactly
    one list element, and any error at all take the whole-file parse, which
    also words every error message: the split never decides an outcome.
    The memo holds the last parse's items only (bounded by the file).
    """

    MIN_ITEMS = 64  # below this the whole-file parse is as fast

    # Each pattern starts with a literal newline (the text is searched as
    # "\n" + text): CPython's re then scans for it at C speed, which a
    # multi-line ^ does not get (a 2 MB file: about 1 ms instead of 20-120).
    _HEAD = re.compile(r"\nbackends:[ \t]*(?:#[^\n]*)?(?=\n|$)")
    _RISKY = re.compile(r"[\s\[{,:][&*!]\S")  # an anchor, alias or tag
    _MARKER = re.compile(r"\n(?:---|\.\.\.|%)")  # documents, directives
    _CONTENT = re.compile(r"\n(?![ \t]*(?:#|\n|$))")  # a line that is not blank or a comment
    _SPACES = re.compile(r" *")
    _ITEM = re.compile(r"-(?:[ \n]|$)")

    def __init__(self) -> None:
        self._memo: dict[str, _Item] = {}
        self._lock = threading.Lock()

    def split(self, text: str) -> tuple[str, int, list[str]] | None:
        """(the file without the items, their indentation, the text after each
        item's dash), or None."""
        t = "\n" + text
        if "\r" in t or t.startswith("\n\ufeff") or self._MARKER.search(t):
            return None
        if ("&" in t or "*" in t or "!" in t) and self._RISKY.search(t):
            return None
        heads = list(self._HEAD.finditer(t))
        if len(heads) != 1:
            return None
        start = heads[0].end()
        first = self._CONTENT.search(t, start)
        if first is None:
            return None
        at = first.start()  # the newline before the first item
        spaces = self._SPACES.match(t, at + 1)  # " *" always matches
        k = spaces.end() - (at + 1) if spaces else 0
        if not self._ITEM.match(t, at + 1 + k):
            return None
        # The block ends at the first content line at column 0 (that is not an item when k is 0).
        end_m = re.compile(r"\n[^\s#-]" if k == 0 else r"\n[^\s#]").search(t, at)
        end = end_m.start() if end_m else len(t)
        block = t[at:end]
        # Inside the block every content line is an item at k or deeper than k.
        bad = re.compile((rf"\n {{0,{k - 1}}}[^ \n#]|" if k else "") + rf"\n {{{k}}}(?:[^ \n#-]|-[^ \n])")
        if bad.search(block):
            return None
        # With no bad line, every newline + k spaces + "-" starts an item
        # (str.split: one C pass). The block starts with one, so the first
        # part is empty; an item's text is what follows its dash.
        items = block.split("\n" + " " * k + "-")[1:]
        if len(items) < self.MIN_ITEMS:
            return None
        return t[1:start] + t[end:], k, items

    def parse(self, text: str, *, remember: bool) -> tuple[RouterFile, dict[str, Any]] | None:
        split = self.split(text)
        if split is None:
            return None
        rest, k, items = split
        dash = " " * k + "-"
        try:
            raw = yaml.load(rest, Loader=_LOADER)
        except yaml.YAMLError:
            return None
        if not isinstance(raw, dict) or raw.get("backends") is not None:
            return None
        with self._lock:
            # Set and list operations over the item texts (C loops): an edit
            # of one item in 20,000 costs a few ms, not a Python step per item.
            memo = self._memo if remember else {}
            if len(memo) > len(items) + self.MIN_ITEMS:  # refused edits left items behind
                memo = {item: memo[item] for item in items if item in memo}
            templated = [item for item in items if "${" in item] if "${" in text else []
            for item in templated:  # its parse holds the variables' values of its time
                hit = memo.get(item)
                if hit is not None and hit[2] != _env_values(item):
                    del memo[item]
            for item in set(items).difference(memo):
                hit = self._one(dash + item)
                if hit is None:
                    return None  # the whole-file parse says what is wrong
                memo[item] = hit
            pairs = list(map(memo.__getitem__, items))
            models: list[BackendConfig] = [pair[1] for pair in pairs]
            try:
                # The other sections, validated as usual; the backends are
                # validated already (one by one) and only need to be unique.
                model = RouterFile.model_validate(interpolate({k: v for k, v in raw.items() if k != "backends"}))
                if len({pair[3] for pair in pairs}) != len(pairs):
                    return None  # the whole-file parse names the duplicate
                model.backends = models
            except (ConfigError, ValidationError, ValueError):
                return None
            if remember:
                if len(memo) > len(items) + self.MIN_ITEMS:  # keep what this file holds (bounded by it)
                    memo = dict(zip(items, pairs, strict=True))
                self._memo = memo
        raw["backends"] = [pair[0] for pair in pairs]
        return model, raw

    @staticmethod
    def _one(item: str) -> _Item | None:
        try:
            parsed = yaml.load(item, Loader=_LOADER)
        except yaml.YAMLError:
            return None
        if not isinstance(parsed, list) or len(parsed) != 1 or not isinstance(parsed[0], dict):
            return None
        try:
            model = BackendConfig.model_validate(interpolate(parsed[0], "backends[]"))
        except (ConfigError, ValidationError):
            return None
        return parsed[0], model, _env_values(item), model.name


def _env_values(item: str) -> tuple[tuple[str, str | None], ...]:
    """The values of the ${VAR}s an item names, as they are now."""
    return tuple((n, os.environ.get(n)) for n in _ENV.findall(item)) if "${" in item else ()


_CHUNKS = _BackendChunks()


def load(path: str | Path) -> tuple[RouterFile, dict[str, Any]]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the config file ({exc.strerror})") from None
    return parse(text, source=str(p))
