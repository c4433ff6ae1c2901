"""`manage.py doctor`: is this node set up to run? One result per check.

Each check returns `Result`s: OK / WARN / FAIL, what it found, and for a WARN
or FAIL a concrete fix. The core checks here cover what the router owns (the
YAML, the database, Redis and its namespace, the process secrets, the node's
own web, the YAML's backends); apps add theirs through `router.extensions.register_doctor_check`
(the coordinator and the wildcard domain are the appproxy app's).

Invariants:
- Read-only: nothing is written to the DB or Redis (the keyspace check reads
  the `deployments` hash that `runnode` writes, it never announces itself).
- The YAML checked is the file (ROUTER_CONFIG / router.yaml), not the DB
  mirror: the doctor is run before a node starts as much as after.
- A secret's value is never part of a result: secrets are "set" / "missing";
  a URL is shown with its userinfo masked; an exception is shown by its type.
- A check that raises is one FAIL naming the check, never a traceback, so one
  broken check does not hide the others.
- A backend the node starts itself (a demo backend, node.demo) that does
  not answer is blamed on the node, never on its URL; any other backend is
  probed from here, whether or not the node runs, and named by its URL.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import redis
import yaml
from django.conf import settings
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from router import extensions
from router.config_schema import ConfigError, RouterFile, parse
from router.core.backend import BackendSpec, masked_url
from router.core.secret import Secret
from router.providers import probe_headers, probe_url
from router.services import resolve_config_path

from .demo import started_by_node
from .nodestate import KEYSPACE_TTL_S

__all__ = ["Context", "Result", "exit_code", "run"]

Status = Literal["OK", "WARN", "FAIL"]
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    status: Status
    found: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4} {self.name:<22} {self.found}"
        return f"{text} — fix: {self.fix}" if self.fix else text

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "found": self.found, "fix": self.fix}


def ok(name: str, found: str) -> Result:
    return Result(name, "OK", found)


def warn(name: str, found: str, fix: str) -> Result:
    return Result(name, "WARN", found, fix)


def fail(name: str, found: str, fix: str) -> Result:
    return Result(name, "FAIL", found, fix)


@dataclass(slots=True)
class Context:
    """What the checks share; filled in as the core checks run."""

    probe: bool = True
    path: Path = field(default_factory=Path)
    raw: dict[str, Any] | None = None  # the YAML as written (templates kept)
    document: RouterFile | None = None  # validated, ${ENV} resolved; None = does not load
    db_ready: bool = False  # reachable and migrated
    node_up: bool | None = None  # the node's web answers /livez; None = not checked


# -- the YAML -------------------------------------------------------------------


def _env_names(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield from _ENV.findall(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _env_names(v)
    elif isinstance(value, list):
        for v in value:
            yield from _env_names(v)


def check_config(ctx: Context) -> Iterator[Result]:
    ctx.path = path = resolve_config_path()
    if not path.exists():
        yield fail(
            "config.yaml", f"{path} does not exist", "set ROUTER_CONFIG=/path/to/router.yaml or create router.yaml"
        )
        return
    try:
        text = path.read_text()
        raw = yaml.safe_load(text) or {}
    except (OSError, UnicodeDecodeError) as exc:
        yield fail("config.yaml", f"{path}: cannot read it ({type(exc).__name__})", f"make {path} readable")
        return
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        yield fail("config.yaml", f"{path}: not valid YAML{at}", f"fix the YAML syntax{at} of {path}")
        return
    if not isinstance(raw, dict):
        yield fail("config.yaml", f"{path}: the top level is not a mapping", "make the file a mapping of sections")
        return
    ctx.raw = raw
    demo = (
        ""
        if settings.ROUTER_CONFIG or path.name == "router.yaml"
        else " (the bundled demo: set ROUTER_CONFIG for your own)"
    )
    yield ok("config.yaml", f"{path} parses ({len(raw.get('backends') or [])} backends){demo}")

    names = sorted(set(_env_names(raw)))
    missing = [n for n in names if n not in os.environ]
    if missing:
        yield fail(
            "config.env",
            f"referenced but not set: {', '.join(missing)}",
            " ".join(f"export {n}=…;" for n in missing) + " (or remove the ${…} reference)",
        )
        yield warn("config.schema", "not checked: the file names variables that are not set", "set them (above)")
        return
    yield ok("config.env", f"{len(names)} referenced variable(s) set" if names else "no ${VAR} referenced")
    try:
        ctx.document, _ = parse(text, source=str(path))
    except ConfigError as exc:
        yield fail(
            "config.schema", "; ".join(str(exc).splitlines()), "correct the keys named (see docs/configuration.md)"
        )
        return
    yield ok("config.schema", "valid (the router schema and every app's section)")


# -- the database -----------------------------------------------------------------


def _db_label(db: dict[str, Any]) -> str:
    engine = str(db.get("ENGINE", "")).rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"sqlite {db.get('NAME')}"
    return f"{engine} {db.get('HOST') or 'localhost'}:{db.get('PORT') or '-'}/{db.get('NAME')}"


def check_database(ctx: Context) -> Iterator[Result]:
    connection = connections["default"]
    db = connection.settings_dict
    label = _db_label(db)
    if connection.vendor == "sqlite" and not connection.creation.is_in_memory_db(db["NAME"]):
        if not Path(str(db["NAME"])).exists():
            # Checked before connecting: SQLite would create an empty file.
            yield fail("db.connection", f"{label} does not exist", "run manage.py migrate (it creates it)")
            return
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        yield fail(
            "db.connection",
            f"{label}: cannot connect ({type(exc).__name__})",
            "start the database or set DATABASE_URL=postgres://user:…@host:5432/name",
        )
        return
    yield ok("db.connection", f"{label} reachable")
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        apps = sorted({migration.app_label for migration, _ in plan})
        yield fail(
            "db.migrations", f"{len(plan)} migration(s) not applied ({', '.join(apps)})", "run manage.py migrate"
        )
        return
    ctx.db_ready = True
    yield ok("db.migrations", "all applied")


# -- Redis --------------------------------------------------------------------------


def check_redis(ctx: Context) -> Iterator[Result]:
    url = masked_url(settings.REDIS_URL)
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=3, socket_connect_timeout=2)
    except ValueError:
        yield fail("redis.connection", "REDIS_URL is not a Redis URL", "set REDIS_URL=redis://HOST:6379/0")
        return
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        yield fail(
            "redis.connection",
            f"{url}: the password is refused ({type(exc).__name__})",
            "set REDIS_URL=redis://:PASSWORD@HOST:6379/0 with the server's password",
        )
        client.close()
        return
    except redis.RedisError as exc:
        yield fail(
            "redis.connection",
            f"{url}: unreachable ({type(exc).__name__})",
            "start redis-server, or set REDIS_URL=redis://HOST:6379/0 to where it runs",
        )
        client.close()
        return
    yield ok("redis.connection", f"{url} answers")
    prefix, own = settings.ROUTER_REDIS_PREFIX, settings.ROUTER_DEPLOYMENT_ID
    try:
        seen = client.hgetall(prefix + "deployments")
    except redis.RedisError as exc:
        yield fail("redis.keyspace", f"cannot read {prefix}deployments ({type(exc).__name__})", "check REDIS_URL")
        return
    finally:
        client.close()
    now, others = time.time(), []
    for name, at in seen.items():
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            recent = now - float(at) < KEYSPACE_TTL_S
        except ValueError:
            recent = False
        if recent and name != own:
            others.append(name)
    if others:
        yield fail(
            "redis.keyspace",
            f"prefix {prefix!r} is shared with deployment(s) {', '.join(sorted(others))} (this is {own})",
            "give each router its own namespace: unset ROUTER_REDIS_PREFIX (the default is per database) "
            "or set ROUTER_REDIS_PREFIX=router:<unique-name>: (or another Redis DB: REDIS_URL=redis://…/N)",
        )
        return
    yield ok("redis.keyspace", f"prefix {prefix!r}: no other deployment writes there")


# -- secrets ------------------------------------------------------------------------


def check_secrets(ctx: Context) -> Iterator[Result]:
    from django.core.checks.security.base import check_secret_key

    generate = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    from_env = bool(os.environ.get("DJANGO_SECRET_KEY"))
    if check_secret_key(None):
        yield fail(
            "secrets.secret_key",
            "SECRET_KEY is weak (short, repetitive or django-insecure-)",
            f"set DJANGO_SECRET_KEY to a long random value: {generate}",
        )
    elif not from_env and not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        # Nodes sharing a database each generated their own key: sessions break across them.
        yield warn(
            "secrets.secret_key",
            "set (generated into this node's var/secret_key)",
            "set DJANGO_SECRET_KEY to one value on every node that shares this database",
        )
    else:
        yield ok("secrets.secret_key", "set" + ("" if from_env else " (generated into var/secret_key)"))
    if settings.DEBUG:
        yield warn(
            "secrets.debug",
            "DJANGO_DEBUG is on (tracebacks with settings are shown)",
            "unset DJANGO_DEBUG in production",
        )
    token = settings.ROUTER_STATUS_TOKEN
    if not token:
        yield warn(
            "secrets.status_token",
            "ROUTER_STATUS_TOKEN missing: /status answers staff sessions only",
            "set ROUTER_STATUS_TOKEN=<random> for scrapers and scripts (python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))')",
        )
    elif len(token) < 16:
        yield warn(
            "secrets.status_token",
            "ROUTER_STATUS_TOKEN set but short (under 16 characters)",
            "use at least 32 random characters",
        )
    else:
        yield ok("secrets.status_token", "ROUTER_STATUS_TOKEN set")


# -- the node's own web ---------------------------------------------------------------

NODE_TIMEOUT_S = 3.0


def _node_address() -> tuple[str, str]:
    """Where the node listens (ROUTER_HOST:ROUTER_PORT, as `make run`), and
    where to reach it from here: a wildcard host is reached on loopback."""
    host = (os.environ.get("ROUTER_HOST") or "127.0.0.1").strip()
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}.get(host, host)
    return host, (os.environ.get("ROUTER_PORT") or "8000").strip()


def check_node(ctx: Context) -> Iterator[Result]:
    name = "node.web"
    host, port = _node_address()
    if not port.isdigit() or not 0 < int(port) < 65536:
        yield fail(name, f"ROUTER_PORT={port!r} is not a port", "set ROUTER_PORT to the node's port (default 8000)")
        return
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    url = f"http://{bracketed}:{port}/livez"
    started = time.monotonic()
    try:
        with httpx.Client(timeout=NODE_TIMEOUT_S, trust_env=False) as client:
            response = client.get(url)
    except httpx.ConnectError:
        ctx.node_up = False
        yield fail(
            name,
            f"the node is not running: nothing listens at {url}",
            "start it with `make run` (the doctor looks at ROUTER_HOST:ROUTER_PORT, default 127.0.0.1:8000)",
        )
        return
    except httpx.HTTPError as exc:
        ctx.node_up = False
        yield fail(
            name,
            f"{url} did not answer within {NODE_TIMEOUT_S:g} s ({type(exc).__name__})",
            "the node is stuck or overloaded: look at its log, restart it (`make run`)",
        )
        return
    ms = (time.monotonic() - started) * 1000
    try:
        live = response.status_code == 200 and response.json() == {"status": "ok"}
    except ValueError:
        live = False
    if not live:
        ctx.node_up = False
        yield fail(
            name,
            f"{url} answered HTTP {response.status_code}, not this router's /livez",
            f"another program holds port {port}: stop it, or set ROUTER_HOST / ROUTER_PORT to where the node listens",
        )
        return
    ctx.node_up = True
    yield ok(name, f"GET {url}: the node answers in {ms:.0f} ms")


# -- backends -----------------------------------------------------------------------


def _probe(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[int | None, str, float]:
    started = time.monotonic()
    try:
        response = client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        return None, type(exc).__name__, 0.0
    return response.status_code, "", (time.monotonic() - started) * 1000


def check_backends(ctx: Context) -> Iterator[Result]:
    doc = ctx.document
    if doc is None:
        yield warn("backends", "not checked: the YAML does not load", "fix the config (above)")
        return
    if not doc.backends:
        yield ok("backends", "none in the YAML")
        return
    due: list[tuple[int, BackendSpec, str]] = []
    for i, b in enumerate(doc.backends):
        if b.cli is not None:
            name = f"backend.{b.name}"
            if shutil.which(b.cli.command[0]) is None:
                yield fail(
                    name,
                    f"command {b.cli.command[0]!r} not found on PATH",
                    f"install it or fix backends[{i}].cli.command",
                )
            else:
                yield ok(name, f"command {b.cli.command[0]!r} found")
            continue
        spec = BackendSpec(
            name=b.name,
            url=b.url,
            kind=b.kind,
            api_key=Secret(b.api_key) if b.api_key else None,
            headers=tuple(b.headers.items()),
        )
        url = probe_url(spec, doc.health.path)
        if url is not None:
            due.append((i, spec, url))
    if not ctx.probe:
        yield ok("backends", f"{len(due)} HTTP backend(s) not probed (--no-probe)")
        return
    timeout = min(doc.health.timeout, 5.0)
    with httpx.Client(timeout=timeout, trust_env=False) as client, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda d: _probe(client, d[2], probe_headers(d[1])), due))
    for (i, spec, url), (status, error, ms) in zip(due, answers, strict=True):
        # Without its query: a provider could carry a key there.
        name, where = f"backend.{spec.name}", masked_url(url).split("?", 1)[0]
        if status is None and started_by_node(spec.url):
            yield from _node_started_backend_down(ctx, name, f"GET {where}: {error}")
        elif status is None or status >= 500:
            why = error if status is None else f"HTTP {status}"
            yield fail(name, f"GET {where}: {why}", f"start the backend or fix backends[{i}].url")
        elif status in (401, 403):
            yield warn(name, f"GET {where}: HTTP {status} (the key is refused)", f"check backends[{i}].api_key")
        elif status >= 400:
            yield warn(name, f"GET {where}: HTTP {status}", "set health.path to a path the backend answers")
        else:
            yield ok(name, f"GET {where}: HTTP {status} in {ms:.0f} ms")


def _node_started_backend_down(ctx: Context, name: str, found: str) -> Iterator[Result]:
    """A demo backend does not answer: the node starts it, so the node is
    what to look at, not the URL."""
    if ctx.node_up is False:
        yield warn(
            name,
            f"{found} (a demo backend: the node starts it, and the node is not running)",
            "start the node with `make run` (it starts this backend)",
        )
    else:
        yield fail(
            name,
            f"{found} (a demo backend: the node starts it, yet it does not answer)",
            "see its log in the node's var/log/ (`make run` names it): did it fail to start, its port taken?",
        )


# -- running them -------------------------------------------------------------------

CORE: tuple[tuple[str, Callable[[Context], Iterable[Result]]], ...] = (
    ("config", check_config),
    ("db", check_database),
    ("redis", check_redis),
    ("secrets", check_secrets),
    ("node", check_node),  # before the backends: they say whether the node is what is down
    ("backends", check_backends),
)


def run(ctx: Context | None = None) -> list[Result]:
    """Every core check, then every app's (in registration order)."""
    ctx = ctx or Context()
    results: list[Result] = []
    for name, check in (*CORE, *extensions.doctor_checks().items()):
        try:
            results.extend(check(ctx))
        except Exception as exc:  # one broken check must not hide the others
            results.append(fail(name, f"the check itself failed ({type(exc).__name__})", "report this as a bug"))
    return results


def exit_code(results: Iterable[Result]) -> int:
    return 1 if any(r.status == "FAIL" for r in results) else 0
