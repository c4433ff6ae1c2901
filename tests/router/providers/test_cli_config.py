"""The `cli:` section of a backend: validation at config load, the way it
travels (YAML → Backend row `extra` with its ${VAR} templates → BackendSpec.cli,
compiled or updated in place) and the admin, which shows such rows but never
creates one."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User

from router import selectors
from router.config_schema import ConfigError, parse
from router.core.backend import CliSpec
from router.models import Backend
from router.services import config_sync


def load_one(backend: str) -> object:
    model, _ = parse(f"backends:\n  - {backend}\n", source="router.yaml")
    (parsed,) = model.backends
    return parsed


def refused(backend: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse(f"backends:\n  - {backend}\n", source="router.yaml")
    (line,) = str(err.value).splitlines()
    return line


def test_a_minimal_cli_backend_and_its_defaults() -> None:
    b = load_one("{name: local, kind: cli, models: [m], cli: {command: [my-model]}}")
    assert b.url == "cli://local" and b.capacity == 1
    assert (b.cli.command, b.cli.prompt, b.cli.env, b.cli.cwd, b.cli.timeout) == (["my-model"], "stdin", [], None, 300)


def test_everything_set() -> None:
    b = load_one(
        "{name: local, kind: cli, url: 'cli://local', capacity: 4, models: [m], served_model: s,"
        " cli: {command: [run, '--model={model}', '{prompt}'], prompt: argument, env: [HOME, API_TOKEN],"
        " cwd: /tmp, timeout: 12.5}}"
    )
    assert b.capacity == 4 and b.cli.prompt == "argument" and b.cli.env == ["HOME", "API_TOKEN"]
    assert (b.cli.cwd, b.cli.timeout) == ("/tmp", 12.5)


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        ("{name: c, kind: cli, models: [m]}", "backends[0]: Value error, kind cli needs a cli: section"),
        (
            "{name: c, url: 'http://h:1', models: [m], cli: {command: [x]}}",
            "backends[0]: Value error, cli: only a backend of kind cli runs a command",
        ),
        (
            "{name: c, kind: cli, url: 'http://h:1', models: [m], cli: {command: [x]}}",
            "backends[0]: Value error, url: a cli backend has no URL; leave it out (it is cli://c)",
        ),
        (
            "{name: c, kind: cli, models: [m], cli: {command: []}}",
            "backends[0].cli.command: List should have at least 1",
        ),
        ("{name: c, kind: cli, models: [m], cli: {command: ['  ']}}", "command[0] must name the program"),
        (
            "{name: c, kind: cli, models: [m], cli: {command: 'my-model --fast'}}",
            "backends[0].cli.command: Input should be a valid list",
        ),
        (
            "{name: c, kind: cli, models: [m], cli: {command: [x], prompt: argument}}",
            "backends[0].cli: Value error, prompt: argument needs an argv item holding {prompt}",
        ),
        (
            "{name: c, kind: cli, models: [m], cli: {command: [x], prompt: pipe}}",
            "backends[0].cli.prompt: Input should be",
        ),
        (
            "{name: c, kind: cli, models: [m], cli: {command: [x], env: ['TOKEN=abc']}}",
            "'TOKEN=abc' is not an environment variable name",
        ),
        (
            "{name: c, kind: cli, models: [m], cli: {command: [x], timeout: 0}}",
            "backends[0].cli.timeout: Input should be greater",
        ),
        ("{name: c, kind: cli, models: [m], cli: {command: [x], shell: true}}", "backends[0].cli.shell: unknown key"),
        (
            "{name: c, kind: cli, models: [m], api_key: k, headers: {a: b}, cli: {command: [x]}}",
            "backends[0]: Value error, api_key, headers: not used by a cli backend",
        ),
        (
            "{name: c, kind: cli, discover_models: true, cli: {command: [x]}}",
            "discover_models: not used by a cli backend",
        ),
        (
            "{name: c, models: [m]}",
            "backends[0].url: Value error, required: the backend's http:// or https:// URL",
        ),
        ("{name: c, url: 'ftp://h', models: [m]}", "backends[0].url: Value error, must be an http:// or https:// URL"),
    ],
)
def test_bad_sections_are_refused_naming_the_key(backend: str, expected: str) -> None:
    line = refused(backend)
    assert line.startswith("router.yaml: backends[0]")
    assert expected in line, line


YAML = """backends:
  - name: local-cli
    kind: cli
    models: [cli-m]
    cli:
      command: [my-model, --dir, "${CLI_TEST_DIR}", "{model}"]
      env: [CLI_TEST_TOKEN]
      timeout: 9
  - name: http-b
    url: http://127.0.0.1:9
    models: [cli-m]
"""


@pytest.fixture
def synced(db, tmp_path, settings, monkeypatch):
    settings.ROUTER_REDIS_PREFIX = f"t{uuid.uuid4().hex[:10]}:"
    monkeypatch.setenv("CLI_TEST_DIR", "/srv/models")
    path = tmp_path / "router.yaml"
    path.write_text(YAML)
    config_sync(path)
    return path


def test_the_row_keeps_templates_and_the_spec_gets_them_resolved(synced, monkeypatch) -> None:
    row = Backend.objects.get(name="local-cli")
    assert row.url == "cli://local-cli" and row.capacity == 1
    assert row.extra["command"]["command"] == ["my-model", "--dir", "${CLI_TEST_DIR}", "{model}"]
    assert "/srv/models" not in str(row.extra)
    snap = selectors.compile_snapshot()
    assert snap.backends["local-cli"].cli == CliSpec(
        command=("my-model", "--dir", "/srv/models", "{model}"), prompt="stdin", env=("CLI_TEST_TOKEN",), timeout=9.0
    )
    assert snap.backends["http-b"].cli is None
    # Edited in place: the change log's update equals a fresh compile.
    synced.write_text(
        YAML.replace("timeout: 9", "timeout: 20\n      prompt: argument").replace('"{model}"', '"{prompt}"')
    )
    config_sync(synced)
    updated = selectors.refresh_snapshot(snap)
    assert updated.backends["local-cli"].cli.timeout == 20.0
    assert updated.backends["local-cli"].cli.prompt == "argument"
    assert updated.backends == selectors.compile_snapshot().backends


def test_the_admin_shows_cli_rows_but_offers_no_cli_kind(synced, client) -> None:
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", None))
    pk = Backend.objects.get(name="local-cli").pk
    assert client.get("/admin/router/backend/").status_code == 200
    page = client.get(f"/admin/router/backend/{pk}/change/")
    assert page.status_code == 200 and b"cli://local-cli" in page.content
    add = client.get("/admin/router/backend/add/")
    assert add.status_code == 200
    assert b'value="ollama"' in add.content and b'value="cli"' not in add.content
    r = client.post(
        "/admin/router/backend/add/",
        {
            "name": "sneaky",
            "url": "http://h:1",
            "kind": "cli",
            "models": "m",
            "weight": 100,
            "priority": 0,
            "connect_timeout": 5,
            "read_timeout": 600,
        },
    )
    assert r.status_code == 200 and not Backend.objects.filter(name="sneaky").exists()


def test_a_hand_edited_invalid_command_costs_that_backend_only(synced) -> None:
    Backend.objects.filter(name="local-cli").update(extra={"command": {"command": [], "shell": True}})
    snap = selectors.compile_snapshot()
    assert snap.backends["local-cli"].cli is None  # its requests fail (502); the snapshot stands
    assert snap.backends["http-b"].url == "http://127.0.0.1:9"
