"""What every AppProxy section of the router YAML shares (seed §7), validated
here; each mode's own section is its package's ``config`` (legacy/config.py:
``appproxy``, router_mode/config.py: ``appproxy_router``).

Invariants:
- Unknown keys are rejected with their path (``appproxy.heartbeat_perid``);
  every message names the key and a fix, and never echoes a value (a value
  could be a secret).
- ``api_secret`` and ``jwt_secret`` become ``router.core.secret.Secret``:
  their repr/str is ``***``; ``${ENV}`` was interpolated by the router loader.
- Durations accept ``"10s"``, ``"500ms"``, ``"1m"``, ``"1h"`` or a number of
  seconds; they must be positive.
- A section is read from the compiled document in the DB
  (``router.ConfigDocument``, written from the YAML by the tasks process),
  never the file; ``load_cached`` re-parses it only when the document's
  digest changes.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar

from django.conf import settings
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from router.config_schema import ConfigError
from router.core.secret import Secret
from router.selectors import document_digest, routing_document

from .envelope import CHANNEL, Format

__all__ = [
    "Duration",
    "SecretValue",
    "WorkerSettings",
    "as_section_validator",
    "load_cached",
    "parse_duration",
    "parse_model",
    "strip_userinfo",
]

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from ``"10s"``, ``"500ms"``, ``"1m"``, ``"1h"`` or a number."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as '10s', '500ms' or a number of seconds")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError("must be a duration such as '10s', '500ms', '1m' or a number of seconds")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ValueError("must be a duration such as '10s', '500ms' or a number of seconds")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("must be a positive duration")
    return seconds


def _secret(value: Any) -> Any:
    if value is None:
        return Secret("")
    if isinstance(value, Secret):
        return value
    if not isinstance(value, str):
        raise ValueError("must be a string (use ${ENV_VAR} to read it from the environment)")
    return Secret(value)


Duration = Annotated[float, BeforeValidator(parse_duration)]
SecretValue = Annotated[Secret, BeforeValidator(_secret), PlainSerializer(lambda _: "***", return_type=str)]


class WorkerSettings(BaseModel):
    """What both AppProxy sections share (the coordinator, the bus, the
    intervals) and what the shared worker code reads. Secrets never print;
    ``REQUIRED`` names the keys ``enabled: true`` needs."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    REQUIRED: ClassVar[tuple[str, ...]] = ("coordinator_url", "api_secret", "authority", "hostname")

    # Empty = not set; required when enabled (checked below).
    enabled: bool = False
    coordinator_url: str = ""
    api_secret: SecretValue = Secret("")  # X-BackendAI-Token
    redis_url: str | None = None  # the event bus; None = the node's REDIS_URL
    authority: str = ""
    hostname: str = ""
    api_port: int | None = Field(default=None, ge=1, le=65535)
    tls_listen: bool = False
    tls_advertised: bool = False
    heartbeat_period: Duration = 10.0
    reconcile_interval: Duration = 15.0
    events_enabled: bool = True
    # Ack format: "auto" answers each event in the format it came in.
    event_format: Literal["auto", "args", "payload"] = "auto"
    channel: str = Field(default=CHANNEL, min_length=1)
    request_timeout: Duration = 5.0  # each coordinator REST call
    retry_backoff_max: Duration = 10.0  # cap of the exponential backoff
    # How long registration waits for the events process to subscribe first.
    subscribe_grace: Duration = 30.0

    @field_validator("coordinator_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v:
            return ""
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an http:// or https:// URL, e.g. http://coordinator:10200")
        return v.rstrip("/")

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(redis|rediss|unix)://", v):
            raise ValueError("must be a redis:// URL, e.g. redis://127.0.0.1:6379/4")
        return v

    @model_validator(mode="after")
    def _required_when_enabled(self) -> Self:
        if not self.enabled:
            return self
        missing = [name for name in self.REQUIRED if not getattr(self, name)]
        if missing:
            raise ValueError(
                f"enabled: true needs {', '.join(missing)} (see docs/appproxy.md; secrets as ${{ENV_VAR}})"
            )
        return self

    def bus_url(self) -> str:
        return self.redis_url or settings.REDIS_URL

    def ack_format(self, received: Format) -> Format:
        return received if self.event_format == "auto" else self.event_format


def strip_userinfo(url: str) -> str:
    """The URL without its user:password@ part (for /status and logs)."""
    if not url:
        return url
    return re.sub(r"^(\w+://)[^@/]*@", r"\1", url)


def _messages(exc: ValidationError, prefix: str) -> list[str]:
    out = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join([prefix, *(str(p) for p in err["loc"])]).strip(".")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see docs/appproxy.md)"
        out.append(f"{where}: {msg}" if where else msg)
    return out


def parse_model(model: type[M], raw: Mapping[str, Any] | None, *, prefix: str, section: str) -> M | None:
    """One validated section of ``model`` (None when absent). Raises ValueError
    naming the bad keys under ``prefix``; shared by both AppProxy sections."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{prefix or section}: must be a mapping of settings")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        raise ValueError("; ".join(_messages(exc, prefix))) from None


def as_section_validator(parse: Callable[..., Any], code: str) -> Callable[[Any], None]:
    """The hook for the router's config schema (which prefixes the section name)."""

    def validate(raw: Any) -> None:
        try:
            parse(raw, prefix="")
        except ValueError as exc:
            raise PydanticCustomError(code, "{detail}", {"detail": str(exc)}) from None

    return validate


# -- the applied document, cached by digest -----------------------------------


def load_cached(cache: dict[str, Any], lock: threading.Lock, section: str, parse: Callable[[Any], Any]) -> Any:
    """``parse`` of one section of the applied YAML document, re-parsed only
    when the document changes. A document this process cannot resolve (a
    ``${ENV}`` it lacks) keeps the last good settings (logged); the first load
    raises ``ConfigError``."""
    key = document_digest()
    with lock:
        if cache["key"] == key:
            return cache["value"]
        try:
            value = parse(getattr(routing_document(), section))
        except (ConfigError, ValueError) as exc:
            if cache["key"] is None:
                raise ConfigError(str(exc)) from None
            log.error("%s: config not reloaded, keeping the last good one: %s", section, exc)
            cache["key"] = key
            return cache["value"]
        cache["key"], cache["value"] = key, value
        return value
