"""The operator YAML: schema, `${ENV}` interpolation, errors that name the key.

Unknown keys are rejected with their YAML path (``backends[2].wieght``). The
schema is the single source of the IFACE contract; docs/configuration.md
mirrors it.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from . import extensions, yaml_quick
from .core.ipnets import parse_networks
from .disaggregation import PROTOCOLS
from .listen import DEFAULT_MODE, TCP, parse_items, parse_mode
from .providers import COMMAND_KINDS, KINDS, RESPONSES_KINDS

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


class QuotaConfig(_Strict):
    """A backend's upstream quota (a cloud provider's limits): at its limit
    it is skipped like a full backend."""

    rps: float | None = Field(default=None, gt=0, description="requests a second, sustained")
    burst: float | None = Field(default=None, ge=1, description="requests at once (default: rps, at least 1)")
    tpm: int | None = Field(default=None, ge=1, description="tokens a minute, prompt and completion")

    @model_validator(mode="after")
    def _some(self) -> QuotaConfig:
        if self.rps is None and self.tpm is None:
            raise ValueError("set rps, tpm or both (or leave quota out)")
        if self.burst is not None and self.rps is None:
            raise ValueError("burst: only with rps (a tpm quota's burst is a minute's tokens)")
        return self


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
    # OpenAI-compatible kinds only: /v1/responses passed through, bridged
    # through chat, or passed through until a 404/405 says it is not served.
    responses: Literal["native", "bridge", "auto"] = "auto"
    quota: QuotaConfig | None = None
    # Disaggregated prefill/decode (docs/disaggregation.md): the phase this
    # replica serves for a model listed under `disaggregation`, and an SGLang
    # prefill replica's bootstrap port.
    role: Literal["prefill", "decode", "both"] = "both"
    bootstrap_port: int | None = Field(default=None, ge=1, le=65535)

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
    def _responses(self) -> BackendConfig:
        if "responses" in self.model_fields_set and self.kind not in RESPONSES_KINDS:
            raise ValueError(
                f"responses: only an OpenAI-compatible backend chooses how it serves /v1/responses; "
                f"kind {self.kind} always serves it one way (see docs/configuration.md)"
            )
        return self

    @model_validator(mode="after")
    def _role(self) -> BackendConfig:
        # A phase is an OpenAI-compatible server's (vLLM, SGLang): the kinds
        # that speak the OpenAI API themselves, as RESPONSES_KINDS are.
        if "role" in self.model_fields_set and self.kind not in RESPONSES_KINDS:
            raise ValueError(
                f"role: only an OpenAI-compatible backend (vllm, sglang, openai_compat) serves one phase of "
                f"disaggregated prefill/decode; kind {self.kind} cannot (see docs/disaggregation.md)"
            )
        if self.bootstrap_port is not None and self.role != "prefill":
            raise ValueError(
                "bootstrap_port: only an SGLang prefill replica has a bootstrap port; set role: prefill "
                "or remove it (see docs/disaggregation.md)"
            )
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
    load_path: str = Field(
        default="/metrics", max_length=200,
        description="where OpenAI-compatible backends publish their load (Prometheus text); '' reads none",
    )
    load_interval: float = Field(default=5.0, gt=0, description="seconds between two reads of a backend's load")
    warmup_interval: float = Field(default=2.0, gt=0, description="seconds between probes of a warming-up backend")
    warmup_timeout: float = Field(
        default=600.0, ge=0, description="how long a starting backend may warm up before it counts as down; 0: never"
    )

    @field_validator("load_path")
    @classmethod
    def _load_path(cls, v: str) -> str:
        if v and not v.startswith("/"):
            raise ValueError("must be a path starting with '/', or '' to read no load")
        return v


class RetryConfig(_Strict):
    max_attempts: int = Field(default=3, ge=1, le=10)
    backoff: float = Field(default=0.05, ge=0)
    retry_on_status: list[int] = Field(default_factory=lambda: [429, 500, 502, 503, 504])


class FallbackConfig(_Strict):
    fallback_chains: dict[str, list[str]] = Field(default_factory=dict)


class ApiKeysConfig(_Strict):
    mode: Literal["open", "blocking"] = "open"
    rate_limit_scope: Literal["node", "cluster"] = "node"


class RateConfig(_Strict):
    rps: float = Field(gt=0, description="requests a second, sustained")
    burst: float | None = Field(default=None, ge=1, description="requests at once (default: rps, at least 1)")


class BypassConfig(_Strict):
    cidrs: list[str] = Field(default_factory=list, description="client networks no limit here applies to")
    keys: list[str] = Field(default_factory=list, description="API key names (or ids) no limit here applies to")

    @field_validator("cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        parse_networks(v)  # raises ValueError naming the bad entry
        return v


class RateLimitsConfig(_Strict):
    """The router's own limits besides each key's: router-wide and per
    client address (requests without a key, open mode)."""

    scope: Literal["cluster", "node"] = "cluster"
    global_: RateConfig | None = Field(default=None, alias="global")
    per_ip: RateConfig | None = None
    bypass: BypassConfig = Field(default_factory=BypassConfig)


class QueueConfig(_Strict):
    max_wait: float = Field(default=10.0, ge=0, description="seconds a request waits for capacity")
    max_waiting: int = Field(default=1000, ge=0)


class ServerConfig(_Strict):
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_response_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    trusted_proxies: list[str] = Field(default_factory=list)
    # Where runnode's web server listens (router/listen.py; read at a node's
    # start; ROUTER_LISTEN / ROUTER_UNIX_SOCKET_MODE take precedence).
    listen: list[str] = Field(default_factory=lambda: [TCP])
    unix_socket_mode: int | str = DEFAULT_MODE

    @field_validator("trusted_proxies")
    @classmethod
    def _nets(cls, v: list[str]) -> list[str]:
        parse_networks(v, strict=True)
        return v

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: list[str]) -> list[str]:
        parse_items(v)
        return v

    @field_validator("unix_socket_mode")
    @classmethod
    def _mode(cls, v: int | str) -> int:
        return parse_mode(v)


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#]+")
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


class CorsConfig(_Strict):
    """`cors`: browser clients of /v1 (router/core/cors.py). Off while
    `allow_origins` is empty."""

    allow_origins: list[str] = Field(default_factory=list)
    allow_methods: list[str] = Field(default_factory=lambda: ["GET", "POST"])
    allow_headers: list[str] = Field(default_factory=lambda: ["*"])
    expose_headers: list[str] = Field(default_factory=list)
    max_age: int = Field(default=600, ge=0, le=86400, description="seconds a browser may cache a preflight")
    allow_credentials: bool = False

    @field_validator("allow_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        for origin in v:
            if origin == "*":
                continue
            if origin.strip().lower() == "null":
                raise ValueError("'null' is the origin of sandboxed and file:// pages; it cannot be allowed")
            if not _ORIGIN.fullmatch(origin.strip().lower()):
                raise ValueError(
                    f"{origin!r} is not an origin: scheme://host[:port], no path and no trailing slash "
                    "(e.g. https://app.example.com), or '*'"
                )
        return [o.strip().lower() for o in v]

    @field_validator("allow_methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        for method in v:
            if method == "*" or not _TOKEN.fullmatch(method):
                raise ValueError(f"{method!r} is not a method name (list them: GET, POST)")
        return [m.upper() for m in v]

    @field_validator("allow_headers", "expose_headers")
    @classmethod
    def _headers(cls, v: list[str]) -> list[str]:
        for name in v:
            if name != "*" and not _TOKEN.fullmatch(name):
                raise ValueError(f"{name!r} is not a header name")
        return v


def _enabled(section: dict[str, Any] | None) -> bool:
    value = section.get("enabled") if isinstance(section, dict) else None
    if isinstance(value, str):
        return value.strip().lower() in {"true", "yes", "on", "1"}
    return value is True or value == 1


class PrefixHashConfig(_Strict):
    load_factor: float = Field(
        default=1.25, ge=1.0, le=100.0,
        description="a backend keeps its prefixes while its in-flight load stays within this × its share",
    )
    session_header: str = Field(default="x-session-id", max_length=100,
                                description="a request with this header is hashed by its value ('' for none)")

    @field_validator("session_header")
    @classmethod
    def _header_name(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", v):
            raise ValueError("must be an HTTP header name (letters, digits, '-'…) or ''")
        return v.lower()


class CacheAwareConfig(_Strict):
    block_chars: int = Field(default=128, ge=16, le=8192, description="characters of prompt per indexed block")
    min_match: float = Field(
        default=0.5, gt=0.0, le=1.0,
        description="the share of a prompt's blocks a replica must hold to be chosen for them",
    )
    max_entries: int = Field(default=131_072, ge=1024, le=50_000_000,
                             description="blocks the index of each web process remembers, at most")
    max_prompt_chars: int = Field(default=65_536, ge=256, le=10_000_000,
                                  description="characters of a prompt's start that are indexed")


class PromptConfig(_Strict):
    """One global prompt, or an override of one (docs/configuration.md):
    inline `text` or a `file` (read by the config writer; relative to the
    YAML's directory), and how it meets the client's own system prompt."""

    text: str | None = None
    file: str | None = Field(default=None, min_length=1)
    mode: Literal["prepend", "append", "replace"] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> PromptConfig:
        if self.text is not None and self.file is not None:
            raise ValueError("text and file: give the prompt inline or in a file, not both")
        return self


class GlobalPromptsConfig(PromptConfig):
    models: dict[str, PromptConfig] = Field(default_factory=dict)
    backends: dict[str, PromptConfig] = Field(default_factory=dict)

    def entries(self) -> list[tuple[str, PromptConfig]]:
        """Every prompt entry with its key path (for files and errors)."""
        out: list[tuple[str, PromptConfig]] = [("global_prompts", self)]
        out += [(f"global_prompts.models.{name}", entry) for name, entry in self.models.items()]
        out += [(f"global_prompts.backends.{name}", entry) for name, entry in self.backends.items()]
        return out


_SIZE = re.compile(r"\s*(\d+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3}


def byte_size(value: Any) -> int:
    """A size in bytes: a whole number, or one with a unit (`64MiB`, `512KiB`, `1GB`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"expected a size in bytes such as 1048576 or 1MiB (units B, KiB, MiB, GiB, KB, MB, GB), "
                         f"got {value!r}")
    return int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


class ResponseCacheConfig(_Strict):
    """`response_cache`: answers of repeated requests served by the router
    (router/respcache/, docs/response-cache.md)."""

    enabled: bool = False
    ttl: float = Field(default=300.0, gt=0, le=30 * 86_400, description="seconds an entry is served")
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=0, description="memory tier per web process (LRU)")
    max_entry_bytes: int = Field(default=1024 * 1024, ge=1, description="larger answers are never stored")
    shared: bool = Field(default=True, description="the Redis tier under the deployment's namespace")
    scope: Literal["key", "global"] = "key"
    deterministic_only: bool = Field(default=True, description="only temperature 0 (or absent with a seed), n 1")

    @field_validator("max_bytes", "max_entry_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return byte_size(v)

    @model_validator(mode="after")
    def _entry_fits(self) -> ResponseCacheConfig:
        if self.max_bytes and self.max_entry_bytes > self.max_bytes:
            raise ValueError(
                f"max_entry_bytes ({self.max_entry_bytes}) is larger than max_bytes ({self.max_bytes}): "
                "no entry that large could stay in memory; lower max_entry_bytes or raise max_bytes"
            )
        return self


class RouterFile(_Strict):
    backends: list[BackendConfig] = Field(default_factory=list)
    selection_strategy: Literal[
        "weighted_round_robin", "least_latency", "least_in_flight", "prefix_hash", "cache_aware"
    ] = "weighted_round_robin"
    prefix_hash: PrefixHashConfig = Field(default_factory=PrefixHashConfig)
    cache_aware: CacheAwareConfig = Field(default_factory=CacheAwareConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    fallback: FallbackConfig = Field(default_factory=FallbackConfig)
    api_keys: ApiKeysConfig = Field(default_factory=ApiKeysConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    rate_limits: RateLimitsConfig = Field(default_factory=RateLimitsConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    global_prompts: GlobalPromptsConfig = Field(default_factory=GlobalPromptsConfig)
    cors: CorsConfig = Field(default_factory=CorsConfig)
    # Ask OpenAI-compatible upstreams for usage on a stream whose client did
    # not (stream_options.include_usage), so every stream is counted.
    stream_usage: bool = True
    response_cache: ResponseCacheConfig = Field(default_factory=ResponseCacheConfig)
    # Model name → the protocol its prefill and decode replicas speak
    # (docs/disaggregation.md).
    disaggregation: dict[str, str] = Field(default_factory=dict)
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

    @field_validator("disaggregation")
    @classmethod
    def _protocols(cls, v: dict[str, str]) -> dict[str, str]:
        for name, protocol in v.items():
            if protocol not in PROTOCOLS:
                raise ValueError(
                    f"{name}: unknown protocol {protocol!r}; one of: {', '.join(sorted(PROTOCOLS))} "
                    "(see docs/disaggregation.md)"
                )
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


def _check_phases(backends: list[BackendConfig], protocols: Mapping[str, str]) -> None:
    """Every disaggregated model has a prefill and a decode replica; a phase
    replica serves only disaggregated models; a bootstrap port only SGLang ones."""
    phases: dict[str, set[str]] = {name: set() for name in protocols}
    for i, b in enumerate(backends):
        if b.role == "both" and b.bootstrap_port is None:
            for name in b.models:
                if name in phases:
                    phases[name].add("both")
            continue
        for name in b.models:
            protocol = protocols.get(name)
            if protocol is None and b.role != "both":
                raise ValueError(
                    f"backends[{i}].role: {b.name!r} is a {b.role} replica of {name!r}, which has no "
                    f"disaggregation entry; add disaggregation: {{{name}: vllm | sglang}} or remove the role"
                )
            if b.bootstrap_port is not None and (protocol is None or not PROTOCOLS[protocol].concurrent):
                raise ValueError(
                    f"backends[{i}].bootstrap_port: {name!r} is not an SGLang disaggregated model "
                    f"(disaggregation.{name} is {protocol or 'absent'}); only SGLang prefill replicas have one"
                )
            if protocol is not None:
                phases[name].add(b.role)
    for name, have in phases.items():
        for role in ("prefill", "decode"):
            if role not in have:
                raise ValueError(
                    f"disaggregation.{name}: no backend with role: {role} serves {name!r}; a disaggregated "
                    "model needs at least one prefill and one decode replica"
                )


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
    model, raw, _ = parse_tracked(text, source=source, remember=remember)
    return model, raw


class Tracked(NamedTuple):
    """What a split parse changed since the parse it started from (``base``,
    None: none, or not remembered). ``config_sync`` applies only this when
    ``base`` is the parse it applied last."""

    base: int | None
    gen: int  # this parse
    gone: list[str]  # names of the items whose text is gone
    added: Sequence[int]  # indices (in the new file) of the items new or parsed anew


def parse_tracked(
    text: str, *, source: str = "<config>", remember: bool = False
) -> tuple[RouterFile, dict[str, Any], Tracked | None]:
    """`parse`, and for a split file what it saw (None: the whole-file parse),
    so the writer can tell the changed backends by their text."""
    parsed = _CHUNKS.parse(text, remember=remember)
    if parsed is not None:
        return parsed
    return (*_parse_whole(text, source), None)


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
    # Across the backends and the disaggregation section: a check of the
    # whole file (the stored document, read back without its backends, is
    # not checked again).
    try:
        _check_phases(model.backends, model.disaggregation)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
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
    objects for the rest; ``parse_tracked`` says which texts it parsed anew
    (``config_sync`` compares only the backends whose text changed).

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
        # The items' indentation the memo's texts were parsed at: an item's
        # text after its dash is valid at one indentation and not at another.
        self._memo_k = -1
        self._last: _Last | None = None  # the last remembered parse
        self._lock = threading.Lock()

    def _cut(self, t: str) -> _Cut | None:
        """Where the items are in ``t`` ("\\n" + the text), or None."""
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
        end_m = self._ends(k).search(t, at)
        end = end_m.start() if end_m else len(t)
        # Inside the block every content line is an item at k or deeper than k.
        if self._bad(k).search(t, at, end):
            return None
        # With no bad line, every newline + k spaces + "-" starts an item
        # (str.split: one C pass). The block starts with one, so the first
        # part is empty; an item's text is what follows its dash.
        items = t[at:end].split("\n" + " " * k + "-")[1:]
        if len(items) < self.MIN_ITEMS:
            return None
        return _Cut(t, start, at, end, k, items)

    @staticmethod
    @functools.cache
    def _ends(k: int) -> re.Pattern[str]:
        return re.compile(r"\n[^\s#-]" if k == 0 else r"\n[^\s#]")

    @staticmethod
    @functools.cache
    def _bad(k: int) -> re.Pattern[str]:
        return re.compile((rf"\n {{0,{k - 1}}}[^ \n#]|" if k else "") + rf"\n {{{k}}}(?:[^ \n#-]|-[^ \n])")

    def split(self, text: str) -> tuple[str, int, list[str]] | None:
        """(the file without the items, their indentation, the text after each
        item's dash), or None."""
        cut = self._cut("\n" + text)
        return None if cut is None else (cut.rest, cut.k, cut.items)

    def _recut(self, last: _Last, t: str) -> tuple[_Cut, int, int, list[str]] | None:
        """The new text as the last one with the items from index i0 to i1
        replaced: (its cut, i0, i1, the new items), or None when the edit is
        not inside the items block (then the whole text is cut again).

        Every check of `_cut` looks at one line at a time, and the two texts
        differ only between the unchanged start and the unchanged end, so
        the checks run over the items that edit touches (from the last item
        start before it to the first one after it) and nothing else."""
        old, cut = last.cut.t, last.cut
        sep = "\n" + " " * cut.k + "-"
        p = _common_prefix(old, t)
        s = _common_suffix(old, t)
        w = old.rfind(sep, cut.at, p - 1 + len(sep))  # the last item that starts before the edit
        if w < 0 or w < cut.at:
            return None
        q = max(len(old) - s, w + 1)  # from q on, the old text is the new one's end
        e_old = old.find(sep, q, cut.end)
        if e_old < 0:
            if cut.end < q:
                return None  # the edit reaches past the items
            e_old = cut.end
        delta = len(t) - len(old)
        e_new = e_old + delta
        if e_new < w or (e_new > w and not t.startswith(sep, w)):
            return None
        if e_new > w:
            segment = t[w:e_new]
            if "\r" in segment or self._MARKER.search(t, w, e_new) or self._RISKY.search(t, w, e_new):
                return None
            if self._ends(cut.k).search(t, w, e_new) or self._bad(cut.k).search(t, w, e_new):
                return None
            new = segment.split(sep)[1:]
        else:
            new = []
        i0 = old.count(sep, cut.at, w)
        i1 = i0 + old.count(sep, w, e_old)
        items = cut.items[:i0] + new + cut.items[i1:]
        if len(items) < self.MIN_ITEMS:
            return None
        return _Cut(t, cut.start, cut.at, cut.end + delta, cut.k, items), i0, i1, new

    def parse(self, text: str, *, remember: bool) -> tuple[RouterFile, dict[str, Any], Tracked] | None:
        t = "\n" + text
        last = self._last if remember else None
        recut = self._recut(last, t) if last is not None and "${" not in t else None
        cut = recut[0] if recut is not None else self._cut(t)
        if cut is None:
            return None
        try:
            raw = yaml.load(cut.rest, Loader=_LOADER)
        except yaml.YAMLError:
            return None
        if not isinstance(raw, dict) or raw.get("backends") is not None or raw.get("disaggregation"):
            # (disaggregation: its checks read every backend, as the whole-file parse does)
            return None
        dash = " " * cut.k + "-"
        with self._lock:
            if last is not None and self._last is not last:
                return None  # another parse moved on meanwhile (the whole-file parse is right)
            # Set and list operations over the item texts (C loops): an edit
            # of one item in 20,000 costs a few ms, not a Python step per item.
            memo = self._memo if remember and self._memo_k == cut.k else {}
            if len(memo) > len(cut.items) + self.MIN_ITEMS:  # refused edits left items behind
                memo = {item: memo[item] for item in cut.items if item in memo}
            if recut is not None:
                assert last is not None
                _, i0, i1, new = recut
                fresh = set(new).difference(memo)
            else:
                templated = [item for item in cut.items if "${" in item] if "${" in text else []
                for item in templated:  # its parse holds the variables' values of its time
                    hit = memo.get(item)
                    if hit is not None and hit[2] != _env_values(item):
                        del memo[item]
                fresh = set(cut.items).difference(memo)
            for item in fresh:
                hit = self._one(dash + item)
                if hit is None:
                    return None  # the whole-file parse says what is wrong
                memo[item] = hit
            if recut is not None:
                assert last is not None
                pairs_new = list(map(memo.__getitem__, new))
                pairs = last.pairs[:i0] + pairs_new + last.pairs[i1:]
                gone = list(map(_NAME, last.pairs[i0:i1]))
                names = last.names.difference(gone)
                for name in map(_NAME, pairs_new):
                    if name in names:
                        return None  # the whole-file parse names the duplicate
                    names.add(name)
                models = last.models[:i0] + list(map(_MODEL, pairs_new)) + last.models[i1:]
                added: Sequence[int] = range(i0, i0 + len(new))
            else:
                pairs = list(map(memo.__getitem__, cut.items))
                names = set(map(_NAME, pairs))
                if len(names) != len(pairs):
                    return None  # the whole-file parse names the duplicate
                models = list(map(_MODEL, pairs))
                gone, added = self._diff(last, cut.items, fresh)
            try:
                # The other sections, validated as usual; the backends are
                # validated already (one by one) and are unique.
                model = RouterFile.model_validate(interpolate({k: v for k, v in raw.items() if k != "backends"}))
                model.backends = models
                if any(b.role != "both" or b.bootstrap_port is not None for b in models):
                    return None  # a phase replica with no disaggregation: the whole-file parse words it
            except (ConfigError, ValidationError, ValueError):
                return None
            gen = next(_GENERATIONS)
            if remember:
                if len(memo) > len(cut.items) + self.MIN_ITEMS:  # keep what this file holds (bounded by it)
                    memo = dict(zip(cut.items, pairs, strict=True))
                self._memo, self._memo_k = memo, cut.k
                self._last = _Last(gen, cut, pairs, models, names)
        raw["backends"] = list(map(_RAW, pairs))
        return model, raw, Tracked(last.gen if last is not None else None, gen, gone, added)

    @staticmethod
    def _diff(last: _Last | None, items: list[str], fresh: set[str]) -> tuple[list[str], Sequence[int]]:
        """What changed since ``last`` when the whole text was cut: the names
        of the items whose text is gone, the indices of the items that are
        new or parsed anew (set operations on the texts)."""
        if last is None:
            return [], range(len(items))
        now = set(items)
        before = dict(zip(last.cut.items, last.pairs, strict=True))
        gone = [before[item][3] for item in before.keys() - now]
        changed = now.difference(before).union(fresh)
        return gone, [i for i, item in enumerate(items) if item in changed]

    @staticmethod
    def _one(item: str) -> _Item | None:
        # A generated file's one-line items without PyYAML's constructors
        # (router.yaml_quick: four fifths of the parse); any other form,
        # and anything it is not sure of, by PyYAML.
        quick = yaml_quick.item(item)
        if quick is not None:
            parsed = [quick]
        else:
            try:
                parsed = yaml.load(item, Loader=_LOADER)
            except yaml.YAMLError:
                return None
            if not isinstance(parsed, list) or len(parsed) != 1 or not isinstance(parsed[0], dict):
                return None
        try:
            # interpolate() copies the whole item: only when it names a ${VAR}
            data = interpolate(parsed[0], "backends[]") if "${" in item else parsed[0]
            model = BackendConfig.model_validate(data)
        except (ConfigError, ValidationError):
            return None
        return parsed[0], model, _env_values(item), model.name


def _env_values(item: str) -> tuple[tuple[str, str | None], ...]:
    """The values of the ${VAR}s an item names, as they are now."""
    return tuple((n, os.environ.get(n)) for n in _ENV.findall(item)) if "${" in item else ()


_RAW, _MODEL, _NAME = itemgetter(0), itemgetter(1), itemgetter(3)  # of an _Item
_GENERATIONS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class _Cut:
    """A text ("\\n" + the file) cut into the items and the rest."""

    t: str
    start: int  # the end of the `backends:` line
    at: int  # the newline before the first item
    end: int  # the end of the items block
    k: int  # the items' indentation
    items: list[str]  # the text after each item's dash

    @property
    def rest(self) -> str:
        return self.t[1 : self.start] + self.t[self.end :]


@dataclass(frozen=True, slots=True)
class _Last:
    """The last remembered split parse: the next one starts from it."""

    gen: int
    cut: _Cut
    pairs: list[_Item]
    models: list[BackendConfig]
    names: set[str]


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix: blocks of 64 Ki, then 4 Ki,
    256, 16 and 1 character compared (C memcmp; a 2 MB text in ~100 steps)."""
    n, at, step = min(len(a), len(b)), 0, 1 << 16
    while step:
        while at + step <= n and a[at : at + step] == b[at : at + step]:
            at += step
        step >>= 4
    return at


def _common_suffix(a: str, b: str) -> int:
    """The length of the longest common suffix, as `_common_prefix`."""
    la, lb = len(a), len(b)
    n, at, step = min(la, lb), 0, 1 << 16
    while step:
        while at + step <= n and a[la - at - step : la - at] == b[lb - at - step : lb - at]:
            at += step
        step >>= 4
    return at
_CHUNKS = _BackendChunks()


def load(path: str | Path) -> tuple[RouterFile, dict[str, Any]]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the config file ({exc.strerror})") from None
    return parse(text, source=str(p))
