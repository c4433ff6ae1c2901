"""`manage.py doctor` with AppProxy enabled: the coordinator reachable and
accepting the token, the registration the DB recorded known to it, the event
bus, and (legacy) the wildcard domain resolving.

The coordinator is the real fake (``FakeCoordinator`` on loopback) and the
registration is made by the worker's own code (``appproxy.worker.register``).
There is no wildcard DNS zone on this machine (and no network to reach one),
so the wildcard tests answer ``socket.getaddrinfo`` for one zone in-process —
the only stand-in; every other name goes to the real resolver."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import uuid

import orjson
import pytest
from django.core.management import call_command

from appproxy import worker
from appproxy.legacy.config import parse_section
from appproxy.router_mode.config import parse_router_section
from router.config_schema import load
from tests.support.routerproc import PY, ROOT, free_port, migrated_template

from .router_support import RouterManager, new_key
from .support import API_SECRET, JWT_SECRET, REDIS_URL, coordinator

pytestmark = pytest.mark.django_db(transaction=True)

ZONE = ".models.test"


@pytest.fixture(autouse=True)
def isolated(settings, tmp_path, monkeypatch, running_node):
    # The node's web answers (node.web OK): these tests are about the coordinator.
    monkeypatch.setenv("ROUTER_HOST", "127.0.0.1")
    monkeypatch.setenv("ROUTER_PORT", str(running_node.port))
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    settings.ROUTER_REDIS_PREFIX = prefix
    settings.ROUTER_NOTICE_CHANNEL = prefix + "notice"
    settings.ROUTER_STATUS_TOKEN = "status-" + "t" * 30
    settings.ROUTER_CONFIG = str(tmp_path / "router.yaml")
    monkeypatch.setenv("APPPROXY_API_SECRET", API_SECRET)
    monkeypatch.setenv("APPPROXY_JWT_SECRET", JWT_SECRET)
    monkeypatch.delenv("APPPROXY_NODE_ID", raising=False)


@pytest.fixture
def dns(monkeypatch):
    """Names under ZONE resolve to 127.0.0.1, other names under .test do not
    exist (EAI_NONAME, as a resolver says); the names asked are recorded."""
    real, asked = socket.getaddrinfo, []

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(host, str) and host.endswith(ZONE):
            asked.append(host)
            return real("127.0.0.1", port, *args, **kwargs)
        if isinstance(host, str) and host.endswith(".test"):
            asked.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.fixture
def fc():
    with coordinator(ack_timeout=0.5) as server:
        yield server


def legacy_yaml(url: str, *, authority: str, domain: str = ZONE, channel: str = "test-doctor") -> str:
    return f"""
backends: []
appproxy:
  enabled: true
  coordinator_url: "{url}"
  api_secret: "${{APPPROXY_API_SECRET}}"
  jwt_secret: "${{APPPROXY_JWT_SECRET}}"
  redis_url: "{REDIS_URL}"
  channel: "{channel}"
  authority: "{authority}"
  hostname: "127.0.0.1"
  wildcard_domain: "{domain}"
"""


def router_yaml(url: str, *, authority: str) -> str:
    return f"""
backends: []
appproxy_router:
  enabled: true
  coordinator_url: "{url}"
  api_secret: "${{APPPROXY_API_SECRET}}"
  redis_url: "{REDIS_URL}"
  channel: "test-doctor-{uuid.uuid4().hex[:8]}"
  authority: "{authority}"
  hostname: "127.0.0.1"
  api_port: {free_port()}
"""


def write(settings, text: str):
    path = settings.ROUTER_CONFIG
    with open(path, "w") as f:
        f.write(text)
    model, _ = load(path)
    return model


def doctor() -> tuple[int, dict[str, dict]]:
    out = io.StringIO()
    code = 0
    try:
        call_command("doctor", "--json", stdout=out)
    except SystemExit as exc:
        code = int(exc.code or 0)
    body = orjson.loads(out.getvalue())
    return code, {c["name"]: c for c in body["checks"]}


def not_ok(checks: dict[str, dict]) -> list[dict]:
    return [c for c in checks.values() if c["status"] != "OK"]


def authority() -> str:
    return f"doctor-{uuid.uuid4().hex[:8]}"


def test_legacy_worker_healthy_every_line_ok(settings, fc, dns):
    """Registered by the worker's own code, the coordinator accepting the
    token, the bus up, the wildcard resolving: every line OK, exit 0."""
    name = authority()
    model = write(settings, legacy_yaml(fc.url, authority=name))
    assert worker.register(parse_section(model.appproxy), boot_id=str(uuid.uuid4()))
    code, checks = doctor()
    assert code == 0, not_ok(checks)
    assert not not_ok(checks)
    assert checks["appproxy.coordinator"]["found"].endswith("reachable, token accepted")
    assert f"of {name!r} registered (0 circuits)" in checks["appproxy.registration"]["found"]
    assert {"appproxy.api_secret", "appproxy.jwt_secret", "appproxy.bus", "appproxy.wildcard"} <= set(checks)
    # a fresh random label under the wildcard, not the apex
    assert any(re.fullmatch(r"doctor-[0-9a-f]{8}" + re.escape(ZONE), host) for host in dns)
    text = orjson.dumps(checks).decode()
    assert API_SECRET not in text and JWT_SECRET not in text


def test_router_worker_healthy_every_line_ok(settings, fc):
    """ROUTER mode, with a coordinator key published so blocking mode has one."""
    name = authority()
    key_plain, key_hash = new_key()
    RouterManager(fc, name).put_key("k1", key_hash)
    model = write(settings, router_yaml(fc.url, authority=name))
    assert worker.register(parse_router_section(model.appproxy_router), boot_id=str(uuid.uuid4()))
    code, checks = doctor()
    assert code == 0, not_ok(checks)
    assert not not_ok(checks)
    assert "appproxy.wildcard" not in checks and "appproxy.jwt_secret" not in checks
    assert checks["keys"]["found"] == "blocking mode, 1 usable key(s)"
    assert key_plain not in orjson.dumps(checks).decode()


def test_coordinator_unreachable_subprocess(tmp_path):
    """The real command in a child process: a closed port → FAIL with the fix, exit 1."""
    config = tmp_path / "router.yaml"
    config.write_text(router_yaml(f"http://127.0.0.1:{free_port()}", authority=authority()))
    db = tmp_path / "db.sqlite3"
    db.write_bytes(migrated_template().read_bytes())
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "ROUTER_VAR_DIR": str(tmp_path),
        "ROUTER_CONFIG": str(config),
        "ROUTER_REDIS_PREFIX": f"t{uuid.uuid4().hex[:10]}:",
        "APPPROXY_API_SECRET": API_SECRET,
    }
    proc = subprocess.run([PY, "manage.py", "doctor"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "appproxy.coordinator" in x)
    assert line.startswith("FAIL") and "unreachable" in line
    assert "fix: start the coordinator, or fix appproxy_router.coordinator_url" in line
    assert API_SECRET not in proc.stdout + proc.stderr


def test_token_rejected(settings, fc, monkeypatch):
    write(settings, legacy_yaml(fc.url, authority=authority()))
    monkeypatch.setenv("APPPROXY_API_SECRET", "not-the-coordinators-secret")
    code, checks = doctor()
    check = checks["appproxy.coordinator"]
    assert code == 1 and check["status"] == "FAIL"
    assert "refuses the token (HTTP 401)" in check["found"]
    assert check["fix"] == "set appproxy.api_secret to the coordinator's api secret"
    assert "appproxy.registration" not in checks  # not asked with a refused token
    assert "not-the-coordinators-secret" not in orjson.dumps(checks).decode()


def test_recorded_worker_unknown_to_the_coordinator_fails(settings, fc, dns):
    """The DB says registered, but the coordinator the YAML names does not
    know that worker (another coordinator, or one that lost its state)."""
    name = authority()
    model = write(settings, legacy_yaml(fc.url, authority=name))
    assert worker.register(parse_section(model.appproxy), boot_id=str(uuid.uuid4()))
    with coordinator() as other:
        write(settings, legacy_yaml(other.url, authority=name))
        code, checks = doctor()
    check = checks["appproxy.registration"]
    assert code == 1 and check["status"] == "FAIL"
    assert "the coordinator does not know worker" in check["found"]
    assert "restart the node's tasks process" in check["fix"]


def test_never_registered_is_a_warning(settings, fc, dns):
    write(settings, legacy_yaml(fc.url, authority=authority()))
    code, checks = doctor()
    check = checks["appproxy.registration"]
    assert code == 0 and check["status"] == "WARN"
    assert "has not registered from this database yet" in check["found"]
    assert "manage.py runnode" in check["fix"]


def test_failed_registration_fails_with_its_error(settings, fc, dns):
    """The worker's last attempt failed (recorded by its own code): FAIL naming it."""
    name = authority()
    model = write(settings, legacy_yaml(fc.url, authority=name))
    fc.stop()
    assert not worker.register(parse_section(model.appproxy), boot_id=str(uuid.uuid4()))
    fc.start()
    code, checks = doctor()
    check = checks["appproxy.registration"]
    assert code == 1 and check["status"] == "FAIL"
    assert "not registered (status unreachable: register: PUT /api/worker" in check["found"]


def test_wildcard_domain_not_resolving(settings, fc, dns):
    model = write(settings, legacy_yaml(fc.url, authority=authority(), domain=".other.test"))
    assert worker.register(parse_section(model.appproxy), boot_id=str(uuid.uuid4()))
    code, checks = doctor()
    check = checks["appproxy.wildcard"]
    assert code == 1 and check["status"] == "FAIL"
    assert "*.other.test does not resolve" in check["found"]
    assert check["fix"] == "add a wildcard DNS record *.other.test pointing at this node"


def test_bus_unreachable(settings, fc, dns):
    name = authority()
    text = legacy_yaml(fc.url, authority=name).replace(REDIS_URL, f"redis://127.0.0.1:{free_port()}/0")
    write(settings, text)
    code, checks = doctor()
    check = checks["appproxy.bus"]
    assert code == 1 and check["status"] == "FAIL" and "appproxy.redis_url" in check["fix"]


def test_secret_written_in_the_yaml_is_a_warning(settings, fc, dns):
    write(settings, legacy_yaml(fc.url, authority=authority()).replace("${APPPROXY_JWT_SECRET}", JWT_SECRET))
    _, checks = doctor()
    check = checks["appproxy.jwt_secret"]
    assert check["status"] == "WARN" and "written in the YAML file" in check["found"]
    assert JWT_SECRET not in orjson.dumps(checks).decode()


def test_off_when_no_section_is_enabled(settings):
    write(settings, "backends: []\nappproxy: {enabled: false}\n")
    _, checks = doctor()
    assert checks["appproxy"] == {
        "name": "appproxy",
        "status": "OK",
        "found": "off (neither appproxy nor appproxy_router is enabled)",
        "fix": "",
    }
