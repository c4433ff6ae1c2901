"""`manage.py doctor`: every check OK on a healthy stack (real Redis, a migrated
DB, a valid YAML, a live fake backend), and each failure it names reported
as FAIL/WARN with its fix and exit code 1.

The healthy case and two failures (an unmigrated DB, Redis on a closed port)
run the real command as a subprocess; the rest call it in-process."""

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

from router.redis import sync_client
from tests.support.redisns import isolated_prefix
from tests.support.routerproc import PY, ROOT, free_port, migrated_template

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
def node(tmp_path, settings, prefix, monkeypatch):
    """In-process: a YAML file of the test's own, the status token set."""
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


def test_healthy_stack_every_line_ok_and_exit_0(tmp_path, openai_backends):
    """A subprocess on a migrated DB, real Redis, a valid YAML with a live
    backend: every check OK, exit 0; no secret's value is printed."""
    (backend,) = openai_backends("live")
    proc = subprocess_doctor(tmp_path, backend_yaml(backend.url))
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
        "backend.live",
        "appproxy",
        "keys",
    } <= names
    assert "HTTP 200" in next(line for line in checks if "backend.live" in line)
    for secret in (BACKEND_KEY, STATUS_TOKEN):
        assert secret not in proc.stdout + proc.stderr

    as_json = subprocess_doctor(tmp_path, backend_yaml(backend.url), "--json")
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
