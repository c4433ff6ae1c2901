"""`manage.py runnode`: the whole node in the foreground (what `make run` runs).

Starts, as supervised child processes (node/supervisor.py): the demo
backends (each one a backend of the config points at: the bundled demo
config, or a copy of it), the web server (uvicorn by
default, or daphne), the tasks process (Celery worker), beat (its scheduler,
one per node: node/beat.py) and the events process (`runworker
appproxy`, only when the `appproxy` section is enabled).

What the terminal shows: one block once every child has started (the
supervisor's start windows passed, the web accepting connections) with every
address, the admin login, the config file and where the logs are; a line
when the config file in use changes (./router.yaml created or removed); and
the supervisor's own lines. The children's output (Celery's banners,
uvicorn's, warnings of the runtime) goes to one file each in <var>/log/
(node/childlog.py); each warning or error they log is also said on the
terminal, and a child that cannot start is reported with the end of its log.

The web listens on TCP, a Unix socket, or both (ROUTER_LISTEN or the YAML's
`server.listen`, router/listen.py): with a socket, uvicorn is started through
config/serve.py and daphne with a Unix endpoint; a stale socket file is
removed first and the file after the stop.

A port already in use, a socket another server accepts on, or a child that
exits during its start window, is a clear error and a non-zero exit. After start, a child that dies is restarted
with backoff while the others keep serving; the children's states go to the
node state file (/readyz detail, /status, dashboard). Ctrl-C or SIGTERM stops
every child's process group; children also die with runnode (PDEATHSIG).

A stop drains (docs/operations.md, "Supervision"): with AppProxy on, the
tasks process is stopped first — it deregisters the node from the
coordinator as it exits — then the others; the web stops accepting and gives
the requests in flight ROUTER_STOP_GRACE seconds (uvicorn's
--timeout-graceful-shutdown) before it cuts what is left, each with an error
(router ShuttingDown). The supervisor waits that long plus STOP_MARGIN_S
before it kills anything.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisError

from node.demo import demo_backends as started_demo_backends
from node.nodebanner import ready_block, started_names
from node.nodestate import keyspace_heartbeat, write_state
from node.supervisor import LOG_LIMIT_BYTES, ChildSpec, StartFailure, Supervisor, port_in_use
from router import listen
from router.config_schema import ConfigError, load
from router.redis import sync_client
from router.services import resolve_config_path

log = logging.getLogger("router.node")

WEB_START_WINDOW_S = float(os.environ.get("ROUTER_WEB_START_SECONDS", "60"))
CHILD_START_WINDOW_S = float(os.environ.get("ROUTER_CHILD_START_SECONDS", "3"))
KEYSPACE_CHECK_S = 5.0
CONFIG_CHECK_S = 1.0
STOP_GRACE_DEFAULT = 30
# The supervisor's wait past the web's grace before it kills: the web's own
# shutdown after the grace (the cut requests' last frames, the runtime's
# stop), the tasks process's warm shutdown.
STOP_MARGIN_S = 10.0
# How long a stop waits for the tasks process (its deregistration) before it
# stops the web anyway.
DEREGISTER_WAIT_S = 10.0


def stop_grace(env) -> int:
    """ROUTER_STOP_GRACE: whole seconds a stopping web process gives the
    requests in flight; a bad value fails the start, naming the variable."""
    raw = (env.get("ROUTER_STOP_GRACE") or "").strip()
    if not raw:
        return STOP_GRACE_DEFAULT
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise CommandError(f"ROUTER_STOP_GRACE must be a whole number of seconds >= 0, got {raw!r}.")
    return value


def child_log_bytes(env) -> int:
    """ROUTER_CHILD_LOG_BYTES: the size past which a child's log file moves to
    `<file>.1` (node/childlog.py); a bad value fails the start, naming it."""
    raw = (env.get("ROUTER_CHILD_LOG_BYTES") or "").strip()
    if not raw:
        return LOG_LIMIT_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise CommandError(f"ROUTER_CHILD_LOG_BYTES must be a whole number of bytes >= 1, got {raw!r}.")
    return value


def logs_dir() -> Path:
    """Where the children's output goes: one file each (node/childlog.py)."""
    return settings.VAR_DIR / "log"


def config_moved(previous: Path) -> Path | None:
    """The config file now in use (ROUTER_CONFIG, else ./router.yaml, else the
    demo's: the tasks process resolves it the same way at each look) when it
    is no longer `previous`, e.g. a router.yaml created beside the demo."""
    now = resolve_config_path()
    return now if now != previous else None


def demo_backends(cfg) -> list[list[str]]:
    """The demo backends the config points at (node/demo.py). Copying the
    demo config to router.yaml, to try blocking keys say, keeps its backends
    running; a config of one's own that names none starts none."""
    return started_demo_backends(cfg.backends)


class Command(BaseCommand):
    help = "Run web, tasks and events processes of one node in the foreground, supervised."

    def add_arguments(self, parser):
        parser.add_argument("--server", choices=["uvicorn", "daphne"], default=os.environ.get("ROUTER_SERVER", "uvicorn"))
        parser.add_argument("--host", default=os.environ.get("ROUTER_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("ROUTER_PORT", "8000")))
        parser.add_argument("--workers", type=int, default=int(os.environ.get("ROUTER_WEB_WORKERS", "1")))
        parser.add_argument("--no-tasks", action="store_true", help="don't start the Celery worker and beat")
        parser.add_argument("--child-output", choices=["files", "inherit"],
                            default=os.environ.get("ROUTER_CHILD_OUTPUT", "files"),
                            help="files: each child's output in <var>/log/<child>.log (a terminal shows the "
                                 "ready block and the warnings); inherit: on runnode's own stdout and stderr "
                                 "(a container's log)")

    def handle(self, *args, **opts):
        opts["stop_grace"] = grace = stop_grace(os.environ)
        log_bytes = child_log_bytes(os.environ)
        path = resolve_config_path()
        try:
            cfg, _ = load(path)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        host, port = opts["host"], opts["port"]
        try:
            opts["listen"] = listen.resolve(os.environ, cfg.server.listen, cfg.server.unix_socket_mode)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        specs = self._specs(demo_backends(cfg), cfg, opts)
        for spec in specs:
            if spec.unix is not None:
                try:  # a socket file left by a node that died; one still served is an error
                    listen.clear_stale(spec.unix)
                except OSError as exc:
                    raise CommandError(f"{spec.name}: {exc}") from None
            if spec.listen is not None and port_in_use(*spec.listen):
                hint = ("is another demo node running? stop it, or run your own config (ROUTER_CONFIG)"
                        if spec.name.startswith("demo") else "stop what uses it, or pass --port / ROUTER_PORT")
                raise CommandError(f"{spec.name}: port {spec.listen[1]} on {spec.listen[0]} is already in use; {hint}")
        admin = self._ensure_admin()

        stopping = False

        def stop(signum=None, frame=None):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        # One coordinator node_id per node start, shared by every child (web,
        # tasks, events) and never reused: a restarted node is a new session.
        os.environ["APPPROXY_NODE_ID"] = str(uuid.uuid4())
        # The children write to files: unbuffered, so what a child said before
        # it died (a start failure's traceback) is in its file.
        os.environ["PYTHONUNBUFFERED"] = "1"
        self._metrics_dir(opts)
        node = Supervisor(specs, cwd=settings.BASE_DIR,
                          write_state=lambda state: write_state(settings.ROUTER_NODE_STATE_FILE, state),
                          say=lambda line: self.stderr.write(line), log_limit_bytes=log_bytes)
        started = started_names(specs, opts["workers"])
        files = [spec.log.name for spec in specs if spec.log is not None]
        logs = f"{logs_dir()}/  ({', '.join(files)})" if files else "this terminal (--child-output inherit)"
        self.stdout.write(f"router: starting {started}; their logs: {logs}")
        def stop_node() -> None:
            self.stdout.write(f"router: stopping (requests in flight get up to {grace}s)")
            node.stop(grace_s=grace + STOP_MARGIN_S, first_s=DEREGISTER_WAIT_S)

        try:
            node.start(should_stop=lambda: stopping)
        except StartFailure as exc:
            raise CommandError(f"node not started: {exc}") from None
        if stopping:
            stop_node()
            sys.exit(0)
        self.stdout.write(ready_block(host=host, port=port, started=started, admin=admin, config=path, logs=logs,
                                      namespace=settings.ROUTER_REDIS_PREFIX, tcp=opts["listen"].tcp,
                                      unix=opts["listen"].unix))
        try:
            last_check, last_config, warned = 0.0, time.monotonic(), set()
            while not stopping:
                if time.monotonic() - last_check >= KEYSPACE_CHECK_S:
                    last_check = time.monotonic()
                    node.extra_state["keyspace_shared_with"] = self._check_keyspace(warned)
                if time.monotonic() - last_config >= CONFIG_CHECK_S:
                    last_config = time.monotonic()
                    if (moved := config_moved(path)) is not None:
                        self.stdout.write(f"router: config file now {moved} (was {path})")
                        path = moved
                node.tick()
                time.sleep(0.2)
        finally:
            stop_node()
        sys.exit(0)

    def _metrics_dir(self, opts) -> None:
        """Several uvicorn workers: each scrape of /metrics reaches one of them,
        so they keep their values in files of one directory (prometheus_client's
        multiprocess mode, docs/metrics.md) that /metrics sums. Emptied at node
        start: the files of a previous run would count again."""
        if opts["workers"] <= 1 or opts["server"] != "uvicorn":
            return
        path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or settings.VAR_DIR / f"prometheus-{settings.ROUTER_NODE_ID}")
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)

    def _specs(self, demo: list[list[str]], cfg, opts) -> list[ChildSpec]:
        py = sys.executable
        host, port = opts["host"], opts["port"]
        specs = []
        for argv in demo:
            specs.append(ChildSpec(f"demo {argv[4]}", [py, "-m", *argv, "--quiet"],
                                   listen=("127.0.0.1", int(argv[2])), start_window_s=WEB_START_WINDOW_S))
        where: listen.Listen = opts.get("listen") or listen.Listen()
        if opts["server"] == "uvicorn" and where.unix is not None:
            # uvicorn's command listens on one address: config/serve.py binds both.
            web = [py, "-m", "config.serve", "--host", host, "--port", str(port), "--unix", where.unix,
                   "--unix-mode", oct(where.mode), "--timeout-graceful-shutdown", str(opts["stop_grace"]),
                   "--workers", str(opts["workers"]), *([] if where.tcp else ["--no-tcp"])]
        elif opts["server"] == "uvicorn":
            web = [py, "-m", "uvicorn", "config.asgi:application", "--host", host, "--port", str(port),
                   "--loop", "uvloop", "--http", "config.server:HttpToolsProtocol", "--no-access-log", "--log-level", "warning",
                   "--timeout-graceful-shutdown", str(opts["stop_grace"]),
                   # The client IP is ours to derive (server.trusted_proxies); uvicorn
                   # would otherwise rewrite the peer from X-Forwarded-For sent via 127.0.0.1.
                   "--no-proxy-headers"]
            if opts["workers"] > 1:
                web += ["--workers", str(opts["workers"])]
        else:
            # daphne has no graceful stop: at SIGTERM it cancels every request at
            # once, and each ends with its error (no grace).
            web = [py, "-m", "daphne", *(["-b", host, "-p", str(port)] if where.tcp else [])]
            if where.unix is not None:  # a Twisted endpoint: its colons escaped, the mode in octal
                web += ["-e", f"unix:{where.unix.replace(':', chr(92) + ':')}:mode={where.mode:o}"]
            web.append("config.asgi:application")
        specs.append(ChildSpec("web", web, listen=(host, port) if where.tcp else None, unix=where.unix,
                               start_window_s=WEB_START_WINDOW_S))
        appproxy = bool((cfg.appproxy or {}).get("enabled") or (cfg.appproxy_router or {}).get("enabled"))
        if not opts["no_tasks"]:
            # With AppProxy, the tasks process deregisters the node as it exits
            # (appproxy.tasks): it goes first, so the coordinator stops sending
            # traffic before the web stops accepting it.
            specs.append(ChildSpec("tasks", [py, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
                                             "--concurrency", "4", "--loglevel", "WARNING", "--without-mingle",
                                             "--without-gossip", "-n", f"tasks-{settings.ROUTER_NODE_ID}@%h"],
                                   start_window_s=CHILD_START_WINDOW_S, stop_first=appproxy))
            specs.append(ChildSpec("beat", [py, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
                                            "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
                                   start_window_s=CHILD_START_WINDOW_S))
        if appproxy:
            specs.append(ChildSpec("events", [py, "manage.py", "runworker", "appproxy"],
                                   start_window_s=CHILD_START_WINDOW_S))
        if opts.get("child_output", "files") == "files":
            for spec in specs:  # "demo demo-openai-a" writes demo-openai-a.log
                spec.log = logs_dir() / f"{spec.name.split()[-1]}.log"
        return specs

    def _check_keyspace(self, warned: set[str]) -> list[str]:
        """Warn (once per other deployment) when another router writes this
        node's Redis namespace; Redis errors are the web's to report."""
        try:
            others = keyspace_heartbeat(sync_client(), settings.ROUTER_REDIS_PREFIX, settings.ROUTER_DEPLOYMENT_ID)
        except RedisError:
            return []
        for other in set(others) - warned:
            log.warning(
                "another router (deployment %s) writes the Redis namespace %r of this one (deployment %s); "
                "they would share recent requests, health verdicts and tasks: give each its own "
                "ROUTER_REDIS_PREFIX (or unset it: the default is per deployment)",
                other, settings.ROUTER_REDIS_PREFIX, settings.ROUTER_DEPLOYMENT_ID,
            )
        warned.update(others)
        return others

    def _ensure_admin(self) -> str:
        """A first-run dashboard login; the password goes to var/, never to the
        terminal or a log. Returns who signs in and where the password is."""
        User = get_user_model()
        target = settings.VAR_DIR / "admin-password"
        superusers = User.objects.filter(is_superuser=True)
        if not superusers.exists():
            password = secrets.token_urlsafe(18)
            User.objects.create_superuser("admin", "", password)
            target.write_text(password + "\n")
            target.chmod(0o600)
            return f"admin  (created now; its password is in {target})"
        if superusers.filter(username="admin").exists() and target.exists():
            return f"admin  (its password is in {target})"
        name = superusers.order_by("pk").values_list("username", flat=True).first()
        return f"{name}  (a password of your own; manage.py changepassword {name} sets a new one)"
