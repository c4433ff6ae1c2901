"""Admin API fixtures: tokens made by the real service, a client that sends one."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client

from adminapi.tokens import token_create
from router.services import config_sync


class Api:
    """The Django test client with an admin token (or none) and JSON bodies."""

    def __init__(self, token: str | None = None, client: Client | None = None) -> None:
        self.client = client or Client()
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def __call__(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        call = getattr(self.client, method.lower())
        extra = {**self.headers, **headers}
        if body is None:
            return call("/api/v1" + path, **extra)
        if isinstance(body, str | bytes):
            content_type = extra.pop("content_type", "application/yaml")
            return call("/api/v1" + path, body, content_type=content_type, **extra)
        return call("/api/v1" + path, body, content_type="application/json", **extra)


@pytest.fixture
def api(db) -> Api:
    _, plaintext = token_create(name="ops")
    return Api(plaintext)


@pytest.fixture
def ro_api(db) -> Api:
    _, plaintext = token_create(name="viewer", read_only=True)
    return Api(plaintext)


def assert_error(response: Any, status: int, code: str) -> dict:
    """The one error shape, with this status and code."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    assert body["error"]["code"] == code, body
    return body["error"]


BASE = """\
# the team's router
backends:
  - name: a
    url: http://user:hunter2@127.0.0.1:9/v1
    models: [m1]
    api_key: sk-literal-secret
  - {name: b, url: 'http://127.0.0.1:9', models: [m1], api_key: '${B_KEY}'}
health: {enabled: false}
"""


@pytest.fixture
def config_file(tmp_path, settings, monkeypatch):
    """A config file the node applied (as its tasks process does at start)."""
    monkeypatch.setenv("B_KEY", "sk-from-env")
    settings.ROUTER_REDIS_PREFIX = f"test:adminapi:{uuid.uuid4().hex}:"
    path = tmp_path / "router.yaml"
    path.write_text(BASE)
    settings.ROUTER_CONFIG = str(path)
    assert config_sync(path)
    return path
