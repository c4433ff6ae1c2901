"""Secrets never print (RTR-7, KEY-2, STYLE 11): a run that issues, uses, refuses
and revokes known keys leaves neither a plaintext key nor its SHA-256 hex in the
router's log (at DEBUG), in the key commands' output (except the one line that
hands the new key out), in /status, /metrics, error bodies, upstream requests
or Redis."""

from __future__ import annotations

import httpx
import redis
from django.conf import settings

from keys.keyring import hash_key
from tests.keys.e2e import MESSAGES, chat, code, models, sdk
from tests.support.routerproc import wait_until


def test_keys_never_appear_in_logs_outputs_or_bodies(openai_backends, router_factory):
    (a,) = openai_backends("a", models=("m", "m-alias"))
    proc = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m, m-alias]}}\nhealth: {{enabled: false}}\n"
        "api_keys: {mode: blocking, rate_limit_scope: cluster}\n",
        env={"ROUTER_LOG_LEVEL": "DEBUG"},
    )
    outputs: list[str] = []  # everything the commands printed that is not the key line
    keys: dict[str, str] = {}

    def manage(*args: str) -> str:
        before = proc.revision()
        out = proc.manage(*args)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.rstrip("\n").splitlines()
        if args[0] == "createapikey":
            keys[args[2]], lines = lines[-1], lines[:-1]
        outputs.extend([*lines, out.stderr])
        if args[0] != "listapikeys":
            wait_until(lambda: proc.revision() > before, 10, what=f"{args[0]} to reach the router")
        return out.stdout

    manage("createapikey", "--name", "full", "--models", "m", "--owner", "team")
    manage("createapikey", "--name", "pinned", "--ips", "203.0.113.7")
    manage("createapikey", "--name", "limited", "--rate-limit", "1")
    keys["unknown"] = "sk-" + "Zq9" * 14  # presented, never issued

    bodies: list[str] = []

    def refused(response, expected):
        bodies.append(response.text)
        assert code(response) == expected

    assert sdk(proc, keys["full"]).chat.completions.create(model="m", messages=MESSAGES).choices
    streamed = list(sdk(proc, keys["full"]).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert streamed
    assert models(proc, keys["full"]).status_code == 200
    refused(chat(proc, keys["full"], model="m-alias"), (403, "model_not_allowed"))
    refused(chat(proc, keys["full"], model="nope"), (404, "model_not_found"))
    refused(chat(proc, keys["pinned"]), (403, "ip_not_allowed"))
    refused(chat(proc, keys["unknown"]), (401, "invalid_api_key"))
    refused(chat(proc, headers={"x-api-key": keys["unknown"]}), (401, "invalid_api_key"))
    assert chat(proc, keys["limited"]).status_code == 200
    refused(chat(proc, keys["limited"]), (429, "rate_limit_exceeded"))
    manage("listapikeys", "--all")
    manage("revokeapikey", "--name", "full")
    refused(chat(proc, keys["full"]), (401, "invalid_api_key"))
    manage("listapikeys", "--all")

    status = proc.status()
    assert status["api_keys_mode"] == "blocking"
    surfaces = {
        "router log": proc.logs(),
        "command output": "\n".join(outputs),
        "/status": str(status),
        "/metrics": httpx.get(proc.url + "/metrics", timeout=10).text,
        "error bodies": "\n".join(bodies),
        "upstream requests": "\n".join(f"{r.headers} {r.body!r}" for r in a.requests),
    }
    # The captures are real: the log has DEBUG/INFO lines and the commands named the keys by hint.
    assert "routing snapshot installed" in surfaces["router log"]
    assert "full" in surfaces["command output"] and "…" in surfaces["command output"]
    for name, plaintext in keys.items():
        for secret in (plaintext, plaintext[3:], hash_key(plaintext)):
            for where, text in surfaces.items():
                assert secret not in text, f"{name} key material in {where}"

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        for plaintext in keys.values():
            digest = hash_key(plaintext)
            assert not list(client.scan_iter(match=f"*{digest}*", count=1000)), "a key hash in Redis"
    finally:
        client.close()
