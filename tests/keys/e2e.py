"""Helpers shared by the key-gate end-to-end tests (real router processes)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import httpx
import openai

from tests.support.routerproc import RouterProc, wait_until

MESSAGES = [{"role": "user", "content": "hi"}]


def create_key(procs: RouterProc | Sequence[RouterProc], *args: str, name: str | None = None) -> str:
    """`manage.py createapikey` against the routers' DB; returns the plaintext
    (the last stdout line) once every router serves the new revision."""
    procs = [procs] if isinstance(procs, RouterProc) else list(procs)
    before = [p.revision() for p in procs]
    out = procs[0].manage("createapikey", "--name", name or f"k-{uuid.uuid4().hex[:8]}", *args)
    assert out.returncode == 0, out.stderr
    wait_until(
        lambda: all(p.revision() > b for p, b in zip(procs, before, strict=True)),
        10,
        what="the new key to reach every router",
    )
    return out.stdout.strip().splitlines()[-1]


def chat(
    proc: RouterProc, key: str | None = None, model: str = "m", headers: dict[str, str] | None = None
) -> httpx.Response:
    """A raw chat request; `key` goes in `Authorization: Bearer`."""
    sent = dict(headers or {})
    if key is not None:
        sent["authorization"] = f"Bearer {key}"
    return httpx.post(
        proc.url + "/v1/chat/completions", json={"model": model, "messages": MESSAGES}, headers=sent, timeout=30
    )


def models(proc: RouterProc, key: str | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
    sent = dict(headers or {})
    if key is not None:
        sent["authorization"] = f"Bearer {key}"
    return httpx.get(proc.url + "/v1/models", headers=sent, timeout=30)


def code(response: httpx.Response) -> tuple[int, str]:
    """(status, OpenAI error code) of a refused request."""
    return response.status_code, response.json()["error"]["code"]


def sdk(proc: RouterProc, key: str, **headers: str) -> openai.OpenAI:
    """The official client; no retries (it would honour Retry-After on a 429)."""
    return openai.OpenAI(
        base_url=proc.url + "/v1", api_key=key, max_retries=0, timeout=30, default_headers=headers or None
    )
