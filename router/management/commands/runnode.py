"""`manage.py runnode`: the whole node in the foreground (what `make run` runs).

Starts, as child processes: the demo backends (only with the bundled demo
config), the web server (uvicorn by default, or daphne), the tasks process
(Celery worker with embedded beat) and the events process (`runworker
appproxy`, only when the `appproxy` section is enabled). Ctrl-C (or SIGTERM)
stops everything it started; if one child dies, the others are stopped too.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from router.config_schema import ConfigError, load
from router.services import DEMO_CONFIG, resolve_config_path

DEMO_BACKENDS = [
    ["fakes.openai_backend", "--port", "18001", "--name", "demo-openai-a", "--models", "demo-chat,demo"],
    ["fakes.openai_backend", "--port", "18002", "--name", "demo-openai-b", "--models", "demo-chat,demo"],
    ["fakes.ollama_backend", "--port", "18434", "--name", "demo-ollama", "--models", "llama3.2"],
]


class Command(BaseCommand):
    help = "Run web, tasks and events processes of one node in the foreground."

    def add_arguments(self, parser):
        parser.add_argument("--server", choices=["uvicorn", "daphne"], default=os.environ.get("ROUTER_SERVER", "uvicorn"))
        parser.add_argument("--host", default=os.environ.get("ROUTER_HOST", "127.0.0.1"))
        parser.add_argument("--port", default=os.environ.get("ROUTER_PORT", "8000"))
        parser.add_argument("--workers", type=int, default=int(os.environ.get("ROUTER_WEB_WORKERS", "1")))
        parser.add_argument("--no-tasks", action="store_true", help="don't start the Celery worker+beat")

    def handle(self, *args, **opts):
        path = resolve_config_path()
        try:
            cfg, _ = load(path)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        py = sys.executable
        procs: list[tuple[str, subprocess.Popen]] = []

        def spawn(name: str, cmd: list[str]) -> None:
            procs.append((name, subprocess.Popen(cmd, cwd=settings.BASE_DIR)))

        if path == DEMO_CONFIG:
            for argv in DEMO_BACKENDS:
                spawn(f"demo {argv[4]}", [py, "-m", *argv, "--quiet"])
        if opts["server"] == "uvicorn":
            web = [py, "-m", "uvicorn", "config.asgi:application", "--host", opts["host"], "--port", str(opts["port"]),
                   "--loop", "uvloop", "--http", "config.server:HttpToolsProtocol", "--no-access-log", "--log-level", "warning",
                   "--timeout-graceful-shutdown", "30",
                   # The client IP is ours to derive (server.trusted_proxies); uvicorn
                   # would otherwise rewrite the peer from X-Forwarded-For sent via 127.0.0.1.
                   "--no-proxy-headers"]
            if opts["workers"] > 1:
                web += ["--workers", str(opts["workers"])]
        else:
            web = [py, "-m", "daphne", "-b", opts["host"], "-p", str(opts["port"]), "config.asgi:application"]
        spawn("web", web)
        if not opts["no_tasks"]:
            spawn("tasks", [py, "-m", "celery", "-A", "config", "worker", "-B", "--pool", "threads",
                            "--concurrency", "4", "--loglevel", "WARNING", "--without-mingle", "--without-gossip",
                            "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")])
        if (cfg.appproxy or {}).get("enabled") or (cfg.appproxy_router or {}).get("enabled"):
            spawn("events", [py, "manage.py", "runworker", "appproxy"])

        self._ensure_admin()
        self.stdout.write(
            f"router: config {path}\n"
            f"router: /v1 at http://{opts['host']}:{opts['port']}/v1   dashboard: http://{opts['host']}:{opts['port']}/dashboard/\n"
            "router: Ctrl-C stops everything"
        )
        stopping = False

        def stop(signum=None, frame=None):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        code = 0
        try:
            while not stopping:
                for name, proc in procs:
                    if proc.poll() is not None:
                        self.stderr.write(f"router: {name} exited with {proc.returncode}; stopping the node")
                        stopping, code = True, 1
                        break
                time.sleep(0.2)
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            deadline = time.monotonic() + 35
            for _, proc in procs:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
        sys.exit(code)

    def _ensure_admin(self) -> None:
        """A first-run dashboard login; the password goes to var/, never to the log."""
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        password = secrets.token_urlsafe(18)
        User.objects.create_superuser("admin", "", password)
        target = settings.VAR_DIR / "admin-password"
        target.write_text(password + "\n")
        target.chmod(0o600)
        self.stdout.write(f"router: dashboard user 'admin' created; its password is in {target}")
