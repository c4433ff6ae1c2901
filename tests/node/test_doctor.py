"""`manage.py doctor`: every check OK on a healthy stack (real Redis, a migrated
DB, a valid YAML, a live fake backend, a running router web), and each failure
it names reported as FAIL/WARN with its fix and exit code 1.

The healthy case and two failures (an unmigrated DB, Redis on a closed port)
run the real command as a subprocess; the rest call it in-process. "The
node" the doctor looks for (ROUTER_HOST:ROUTER_PORT) is a real router web
process, one for the module; a test that wants it stopped points ROUTER_PORT
at a closed port."""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest
from django.core.management import call_command

from node.supervisor import port_in_use
from router.redis import sync_client
from router.services import DEMO_CONFIG
from tests.support.redisns import isolated_prefix
from tests.support.routerproc import PY, ROOT, free_port, migrated_template, wait_until

pytestmark = pytest.mark.django_db

BACKEND_KEY = "sk-doctor-backend-SECRET-value"
STATUS_TOKEN = "status-token-SECRET-" + "x" * 24


def backend_yaml(url: str, *, key: str = "${DOCTOR_BACKEND_KEY}") -> str:
    return f"""
backends:
  - name: live
    url: {url}
    models: [m]
    api_key: "{key}"
"""


@pytest.fixture
def prefix(settings):
    """A Redis namespace of this test only; removed afterwards."""
    yield from isolated_prefix(settings, "doctor")


@pytest.fixture
def node(tmp_path, settings, prefix, monkeypatch, running_node):
    """In-process: a YAML file of the test's own, the status token set, the
    node's web answering at ROUTER_HOST:ROUTER_PORT."""
    monkeypatch.setenv("ROUTER_HOST", "127.0.0.1")
    monkeypatch.setenv("ROUTER_PORT", str(running_node.port))
    path = tmp_path / "router.yaml"
    settings.ROUTER_CONFIG = str(path)
    settings.ROUTER_STATUS_TOKEN = STATUS_TOKEN
    monkeypatch.setenv("DOCTOR_BACKEND_KEY", BACKEND_KEY)
    return path


def doctor(*args: str) -> tuple[int, dict]:
    """`manage.py doctor --json` in-process: (exit code, body)."""
    out = io.StringIO()
    code = 0
    try:
        call_command("doctor", "--json", *args, stdout=out)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, orjson.loads(out.getvalue())


def by_name(body: dict) -> dict[str, dict]:
    return {c["name"]: c for c in body["checks"]}


def subprocess_doctor(tmp_path: Path, config: str, *args: str, db: Path | None = None, **env: str):
    """The real command in a child process with its own DB, var dir and prefix."""
    path = tmp_path / "router.yaml"
    path.write_text(config)
    if db is None:
        db = tmp_path / "db.sqlite3"
        shutil.copy(migrated_template(), db)
    child_env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "ROUTER_VAR_DIR": str(tmp_path),
        "ROUTER_CONFIG": str(path),
        "ROUTER_REDIS_PREFIX": f"test:doctor:{uuid.uuid4().hex}:",
        "ROUTER_STATUS_TOKEN": STATUS_TOKEN,
        "DOCTOR_BACKEND_KEY": BACKEND_KEY,
        **env,
    }
    proc = subprocess.run(
        [PY, "manage.py", "doctor", *args], cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=120
    )
    return proc


def test_healthy_stack_every_line_ok_and_exit_0(tmp_path, openai_backends, running_node):
    """A subprocess on a migrated DB, real Redis, a valid YAML with a live
    backend, the node's web running: every check OK, exit 0; no secret's
    value is printed."""
    (backend,) = openai_backends("live")
    where = {"ROUTER_HOST": "127.0.0.1", "ROUTER_PORT": str(running_node.port)}
    proc = subprocess_doctor(tmp_path, backend_yaml(backend.url), **where)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    checks, summary = lines[:-1], lines[-1]
    assert summary == f"{len(checks)} checks: 0 failed, 0 warnings"
    assert all(line.startswith("OK ") for line in checks), proc.stdout
    names = {line.split()[1] for line in checks}
    assert {
        "config.yaml",
        "config.env",
        "config.schema",
        "db.connection",
        "db.migrations",
        "redis.connection",
        "redis.keyspace",
        "secrets.secret_key",
        "secrets.status_token",
        "node.web",
        "backend.live",
        "appproxy",
        "keys",
    } <= names
    assert "HTTP 200" in next(line for line in checks if "backend.live" in line)
    for secret in (BACKEND_KEY, STATUS_TOKEN):
        assert secret not in proc.stdout + proc.stderr

    as_json = subprocess_doctor(tmp_path, backend_yaml(backend.url), "--json", **where)
    body = orjson.loads(as_json.stdout)
    assert as_json.returncode == 0 and body["ok"] is True
    assert {c["status"] for c in body["checks"]} == {"OK"}


@pytest.fixture
def keyed_backend():
    """A real HTTP server on loopback whose /v1/models answers 200 only to
    `Authorization: Bearer <BACKEND_KEY>` (401 otherwise), like a cloud API."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            good = self.path == "/v1/models" and self.headers.get("Authorization") == f"Bearer {BACKEND_KEY}"
            body = b'{"object": "list", "data": []}' if good else b'{"error": {"message": "bad key"}}'
            self.send_response(200 if good else 401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_backend_probe_sends_the_providers_auth_header(node, keyed_backend, monkeypatch):
    """The probe is the health probe's GET with the key as the provider sends
    it: the right key is OK, a refused one is a WARN naming api_key."""
    node.write_text(backend_yaml(keyed_backend))
    code, body = doctor()
    assert code == 0 and by_name(body)["backend.live"]["status"] == "OK", [
        c for c in body["checks"] if c["status"] != "OK"
    ]

    monkeypatch.setenv("DOCTOR_BACKEND_KEY", "sk-wrong")
    code, body = doctor()
    check = by_name(body)["backend.live"]
    assert code == 0 and check["status"] == "WARN"
    assert "HTTP 401" in check["found"] and check["fix"] == "check backends[0].api_key"


def test_unmigrated_database_fails_with_migrate(tmp_path, openai_backends):
    """A fresh empty SQLite file (subprocess, DATABASE_URL): db.migrations FAIL → run migrate."""
    (backend,) = openai_backends("live")
    db = tmp_path / "empty.sqlite3"
    sqlite3.connect(db).close()
    proc = subprocess_doctor(tmp_path, backend_yaml(backend.url), "--json", db=db)
    assert proc.returncode == 1
    checks = by_name(orjson.loads(proc.stdout))
    assert checks["db.connection"]["status"] == "OK"
    assert checks["db.migrations"]["status"] == "FAIL"
    assert checks["db.migrations"]["fix"] == "run manage.py migrate"


def test_missing_sqlite_file_is_not_created(tmp_path):
    """A DATABASE_URL naming a file that does not exist: FAIL, and the doctor leaves no file behind."""
    db = tmp_path / "absent.sqlite3"
    proc = subprocess_doctor(tmp_path, "backends: []\n", "--json", db=db)
    assert proc.returncode == 1
    assert by_name(orjson.loads(proc.stdout))["db.connection"]["status"] == "FAIL"
    assert not db.exists()


def test_redis_unreachable_fails_with_redis_url(tmp_path):
    """REDIS_URL at a closed port (subprocess): redis.connection FAIL → set REDIS_URL."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    proc = subprocess_doctor(tmp_path, "backends: []\n", REDIS_URL=url)
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if "redis.connection" in x)
    assert line.startswith("FAIL") and f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in line
    assert "set REDIS_URL=" in line


def test_yaml_parse_error(node):
    node.write_text("backends:\n  - name: a\n    models: [m\n")
    code, body = doctor()
    check = by_name(body)["config.yaml"]
    assert code == 1 and check["status"] == "FAIL"
    assert "not valid YAML at line" in check["found"] and "fix the YAML syntax" in check["fix"]


def test_schema_error_names_the_key(node):
    node.write_text("backends:\n  - name: a\n    url: http://127.0.0.1:9\n    models: [m]\n    wieght: 3\n")
    code, body = doctor("--no-probe")
    check = by_name(body)["config.schema"]
    assert code == 1 and check["status"] == "FAIL"
    assert "backends[0].wieght: unknown key" in check["found"]
    assert "docs/configuration.md" in check["fix"]


def test_appproxy_section_error_comes_from_its_validator(node):
    """The section validators the apps register are part of the schema check."""
    node.write_text("backends: []\nappproxy:\n  enabled: true\n  heartbeat_perid: 3s\n")
    code, body = doctor()
    check = by_name(body)["config.schema"]
    assert code == 1 and check["status"] == "FAIL" and "heartbeat_perid" in check["found"]


def test_missing_env_secret_is_named_never_its_value(node, monkeypatch, openai_backends):
    (backend,) = openai_backends("live")
    monkeypatch.delenv("DOCTOR_BACKEND_KEY")
    node.write_text(backend_yaml(backend.url) + '    headers: {x-extra: "${DOCTOR_OTHER_HEADER}"}\n')
    monkeypatch.setenv("DOCTOR_OTHER_HEADER", "header-SECRET-value")
    code, body = doctor()
    checks = by_name(body)
    assert code == 1
    assert checks["config.env"]["status"] == "FAIL"
    assert checks["config.env"]["found"] == "referenced but not set: DOCTOR_BACKEND_KEY"
    assert "export DOCTOR_BACKEND_KEY=" in checks["config.env"]["fix"]
    assert checks["config.schema"]["status"] == "WARN"  # not checked until it is set
    assert "header-SECRET-value" not in orjson.dumps(body).decode()


def test_shared_keyspace_fails(node, prefix, settings):
    """Another deployment id announced in the `deployments` hash within the
    TTL: FAIL → ROUTER_REDIS_PREFIX; one that stopped announcing long ago, or
    this deployment itself, is not flagged."""
    node.write_text("backends: []\n")
    client = sync_client()
    client.hset(prefix + "deployments", mapping={settings.ROUTER_DEPLOYMENT_ID: time.time(), "old": time.time() - 600})
    code, body = doctor()
    assert code == 0 and by_name(body)["redis.keyspace"]["status"] == "OK"

    client.hset(prefix + "deployments", "0123456789", time.time())
    code, body = doctor()
    check = by_name(body)["redis.keyspace"]
    assert code == 1 and check["status"] == "FAIL"
    assert "0123456789" in check["found"] and "old" not in check["found"]
    assert "ROUTER_REDIS_PREFIX" in check["fix"]


def test_dead_backend_fails_and_no_probe_skips_it(node):
    node.write_text(backend_yaml(f"http://127.0.0.1:{free_port()}"))
    code, body = doctor()
    check = by_name(body)["backend.live"]
    assert code == 1 and check["status"] == "FAIL"
    assert "ConnectError" in check["found"] and "backends[0].url" in check["fix"]

    code, body = doctor("--no-probe")
    assert code == 0 and "backend.live" not in by_name(body)
    assert "not probed" in by_name(body)["backends"]["found"]


def test_missing_cli_program_fails(node):
    node.write_text(
        "backends:\n  - name: cmd\n    kind: cli\n    models: [m]\n    cli: {command: [doctor-no-such-program-x]}\n"
    )
    code, body = doctor()
    check = by_name(body)["backend.cmd"]
    assert code == 1 and check["status"] == "FAIL" and "doctor-no-such-program-x" in check["found"]


def test_weak_secret_key_and_missing_status_token(node, settings):
    node.write_text("backends: []\n")
    settings.SECRET_KEY = "django-insecure-" + "a" * 40
    settings.ROUTER_STATUS_TOKEN = ""
    code, body = doctor()
    checks = by_name(body)
    assert code == 1
    assert (
        checks["secrets.secret_key"]["status"] == "FAIL" and "DJANGO_SECRET_KEY" in checks["secrets.secret_key"]["fix"]
    )
    assert checks["secrets.status_token"]["status"] == "WARN"
    assert "set ROUTER_STATUS_TOKEN=" in checks["secrets.status_token"]["fix"]
    assert settings.SECRET_KEY not in orjson.dumps(body).decode()


def test_text_output_one_line_per_check_with_the_fix(node):
    node.write_text(backend_yaml(f"http://127.0.0.1:{free_port()}"))
    out = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        call_command("doctor", stdout=out)
    assert exc.value.code == 1
    line = next(x for x in out.getvalue().splitlines() if "backend.live" in x)
    assert line.startswith("FAIL") and " — fix: start the backend or fix backends[0].url" in line


# -- the node's own web ----------------------------------------------------------------


def test_the_running_node_is_ok(node, running_node):
    node.write_text("backends: []\n")
    code, body = doctor()
    check = by_name(body)["node.web"]
    assert code == 0 and check["status"] == "OK"
    assert f"http://127.0.0.1:{running_node.port}/livez" in check["found"]


def test_a_stopped_node_fails_saying_so_with_make_run(node, monkeypatch):
    """Nothing listens at ROUTER_PORT: node.web FAIL "the node is not running",
    fix `make run`, one line of the text output."""
    port = free_port()
    monkeypatch.setenv("ROUTER_PORT", str(port))
    node.write_text("backends: []\n")
    code, body = doctor()
    check = by_name(body)["node.web"]
    assert code == 1 and check["status"] == "FAIL"
    assert check["found"].startswith("the node is not running") and f"127.0.0.1:{port}" in check["found"]
    assert check["fix"].startswith("start it with `make run`")

    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("doctor", stdout=out)
    line = next(x for x in out.getvalue().splitlines() if "node.web" in x)
    assert line.startswith("FAIL") and "the node is not running" in line and "fix: start it with `make run`" in line


def test_a_node_on_every_interface_is_looked_for_on_loopback(node, monkeypatch, running_node):
    monkeypatch.setenv("ROUTER_HOST", "0.0.0.0")
    node.write_text("backends: []\n")
    check = by_name(doctor()[1])["node.web"]
    assert check["status"] == "OK" and f"http://127.0.0.1:{running_node.port}/livez" in check["found"]


def test_another_program_on_the_port_is_not_taken_for_the_node(node, monkeypatch, keyed_backend):
    """Something answers at ROUTER_PORT, but not the router's /livez: FAIL, naming the port."""
    port = keyed_backend.rsplit(":", 1)[1]
    monkeypatch.setenv("ROUTER_PORT", port)
    node.write_text("backends: []\n")
    code, body = doctor()
    check = by_name(body)["node.web"]
    assert code == 1 and check["status"] == "FAIL"
    assert "HTTP 401" in check["found"] and "not this router" in check["found"]
    assert "ROUTER_PORT" in check["fix"]


def test_a_bad_router_port_is_named(node, monkeypatch):
    monkeypatch.setenv("ROUTER_PORT", "eighty")
    node.write_text("backends: []\n")
    check = by_name(doctor()[1])["node.web"]
    assert check["status"] == "FAIL" and "'eighty'" in check["found"] and "ROUTER_PORT" in check["fix"]


def _demo_ports_closed() -> None:
    """The demo backends' ports are fixed: wait out a demo node another test stopped."""
    ports = (18001, 18002, 18434)
    wait_until(lambda: not any(port_in_use("127.0.0.1", p) for p in ports), 30, what="the demo ports to close")


def test_with_the_node_stopped_the_demo_backends_blame_the_node_not_their_urls(node, monkeypatch):
    """The demo config with no node running: the demo backends (which the
    node starts) are not answering because the node is down; the doctor
    says so instead of "fix backends[i].url". A backend that does not
    depend on the node (the command) is still checked as usual."""
    _demo_ports_closed()
    monkeypatch.setenv("ROUTER_PORT", str(free_port()))
    node.write_text(DEMO_CONFIG.read_text())
    code, body = doctor()
    checks = by_name(body)
    assert code == 1 and checks["node.web"]["status"] == "FAIL"
    for i, name in enumerate(("demo-openai-a", "demo-openai-b", "demo-ollama")):
        check = checks[f"backend.{name}"]
        assert check["status"] == "WARN", check
        assert "the node starts it" in check["found"] and "not running" in check["found"]
        assert check["fix"] == "start the node with `make run` (it starts this backend)"
        assert f"backends[{i}].url" not in check["fix"]
    assert checks["backend.demo-cli"]["status"] == "OK"


def test_with_the_node_running_a_missing_demo_backend_points_at_the_node(node):
    """The node answers but a demo backend it should have started does not:
    FAIL, and the fix is the backend's log in the node's var dir, not its URL."""
    _demo_ports_closed()
    node.write_text(DEMO_CONFIG.read_text())
    code, body = doctor()
    check = by_name(body)["backend.demo-ollama"]
    assert code == 1 and check["status"] == "FAIL"
    assert "the node starts it" in check["found"]
    assert "url" not in check["fix"] and "var/log/" in check["fix"]


def test_with_the_node_stopped_an_independent_backend_is_still_checked_as_such(node, monkeypatch):
    """A backend of one's own does not depend on the node: with the node
    stopped, a dead one still names its URL."""
    monkeypatch.setenv("ROUTER_PORT", str(free_port()))
    node.write_text(backend_yaml(f"http://127.0.0.1:{free_port()}"))
    check = by_name(doctor()[1])["backend.live"]
    assert check["status"] == "FAIL" and check["fix"] == "start the backend or fix backends[0].url"
