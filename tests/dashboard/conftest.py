"""Fixtures for the operator UI: staff clients, a populated mirror, an
isolated Redis prefix for observations, and a live runtime when needed."""

from __future__ import annotations

import time

import orjson
import pytest
from django.contrib.auth.models import User

from keys.services import key_create, key_revoke
from router import runtime as runtime_module
from router.models import Backend, ConfigDocument, Source
from router.observe import recent_key
from router.redis import sync_client
from router.revision import bump_revision
from tests.support.redisns import isolated_prefix

UPSTREAM_SECRET = "sk-upstream-SECRET"
ENV_SECRET = "sk-env-SECRET-from-environment"
JWT_SECRET = "jwt-SECRET-literal-in-yaml"
COORD_SECRET = "coord-SECRET-token-from-environment"

PAGES = (
    "/dashboard/",
    "/dashboard/backends/",
    "/dashboard/models/",
    "/dashboard/circuits/",
    "/dashboard/keys/",
    "/dashboard/requests/",
    "/dashboard/batches/",
    "/dashboard/files/",
    "/dashboard/events/",
    "/dashboard/publications/",
)


@pytest.fixture
def staff(client):
    """A staff user without model permissions: enough for the dashboard."""
    user = User.objects.create_user("operator", "op@example.com", None, is_staff=True)
    client.force_login(user)
    return client


@pytest.fixture
def superuser(client):
    user = User.objects.create_superuser("admin", "admin@example.com", None)
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def redis_prefix(settings):
    """Observations of this test only; removed afterwards."""
    yield from isolated_prefix(settings, "dashboard")


@pytest.fixture
def observations(redis_prefix):
    """Push observations the way router.observe's drainer does (newest first)."""

    def push(*items: dict) -> None:
        client = sync_client()
        for obs in items:
            client.lpush(recent_key(), orjson.dumps({"ts": time.time(), **obs}))

    return push


@pytest.fixture
def mirror(db, monkeypatch):
    """Two config backends, one admin backend with an upstream key, a fallback
    chain, a YAML literal secret, and an active + a revoked operator key."""
    monkeypatch.setenv("DASH_TEST_UPSTREAM", ENV_SECRET)
    monkeypatch.setenv("COORD_TOKEN", COORD_SECRET)
    ConfigDocument.objects.update_or_create(
        pk=1,
        defaults={
            "path": "/etc/router/router.yaml",
            "digest": "d" * 64,
            "document": {
                "selection_strategy": "least_latency",
                "fallback": {"fallback_chains": {"chat": ["chat-small", "ghost"]}},
                "api_keys": {"mode": "blocking"},
                "appproxy": {"jwt_secret": JWT_SECRET, "api_secret": "${COORD_TOKEN}"},
            },
        },
    )
    Backend.objects.create(
        name="vllm-a",
        source=Source.CONFIG,
        url="http://10.0.0.1:8000",
        kind="vllm",
        models=["chat", "llama"],
        weight=300,
        capacity=8,
        api_key="${DASH_TEST_UPSTREAM}",
    )
    Backend.objects.create(
        name="ollama-b", source=Source.CONFIG, url="http://10.0.0.2:11434", kind="ollama", models=["chat-small"]
    )
    Backend.objects.create(
        name="cloud-c",
        source=Source.ADMIN,
        url="https://api.example.com",
        kind="openai_api",
        models=["chat"],
        api_key=UPSTREAM_SECRET,
        priority=1,
    )
    Backend.objects.create(
        name="appproxy-c1-r1", source=Source.APPPROXY, url="http://10.0.0.9:8000", kind="vllm", models=["served"]
    )
    bump_revision("test mirror")
    key, plaintext = key_create(name="team-a", owner="alice", allowed_models=["chat"], rate_limit=60)
    old, _ = key_create(name="retired", owner="bob")
    key_revoke(old)
    return {"key": key, "plaintext": plaintext, "revoked": old}


@pytest.fixture
def live_runtime(db, monkeypatch):
    """A Runtime with a snapshot installed, as in a serving web process."""
    from router.selectors import compile_snapshot

    rt = runtime_module.Runtime()
    monkeypatch.setattr(runtime_module, "_runtime", rt)

    def install():
        rt.install(compile_snapshot())
        return rt

    return install
