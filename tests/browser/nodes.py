"""A real node for the browser tests: `manage.py runnode` on free ports, in
front of fake OpenAI-compatible backends (real HTTP on loopback).

`Node.start()` starts one; `Node.start(join=other)` starts a second node of
the same deployment (same database, same ROUTER_REDIS_PREFIX, its own var
dir and port), as a cluster would run them. The dashboard login is the
node's own first-run admin (runnode writes its password to
<var>/admin-password); API keys are made with `manage.py createapikey`
against the node's database, and requests are sent with the official
`openai` SDK.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

import openai
import redis

from fakes import openai_backend
from fakes.server import ServerThread
from tests.support.nodeproc import NodeProc
from tests.support.routerproc import PY, ROOT, wait_until

MODEL = "browser-chat"
ADMIN_USER = "admin"


def node_config(backends: Mapping[str, ServerThread], model: str = MODEL) -> str:
    """Blocking mode (every /v1 request needs a key), one model on all backends,
    the strategy with the longest name (its Overview tile once clipped it)."""
    lines = ["api_keys: {mode: blocking}", "selection_strategy: weighted_round_robin", "backends:"]
    lines += [f"  - {{name: {name}, url: '{b.url}', models: [{model}]}}" for name, b in backends.items()]
    return "\n".join(lines) + "\n"


def start_backends(*names: str, model: str = MODEL) -> dict[str, ServerThread]:
    """Fake OpenAI-compatible backends by name, started (stop them after)."""
    return {name: openai_backend.server_thread(name, [model]).start() for name in names}


class Node:
    def __init__(self, proc: NodeProc) -> None:
        self.proc = proc

    @classmethod
    def start(
        cls, config: str, *, join: Node | None = None, env: dict[str, str] | None = None, port: int | None = None
    ) -> Node:
        """Start a node and wait until it serves; `join` makes it a second
        node of that node's deployment (its database and Redis prefix);
        `port` when the config must name it (a ROUTER node's api_port)."""
        shared = {"ROUTER_REDIS_PREFIX": f"test:browser:{uuid.uuid4().hex[:10]}:", "ROUTER_POLL_SECONDS": "2"}
        if join is not None:
            shared = {k: join.proc.env[k] for k in ("ROUTER_REDIS_PREFIX", "DATABASE_URL", "ROUTER_STATUS_TOKEN")}
        proc = NodeProc(config=config, env={**shared, **(env or {})}, port=port)
        node = cls(proc)
        try:
            proc.start()
        except BaseException:
            proc.stop()
            raise
        return node

    def stop(self) -> None:
        self.proc.stop()

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def status_token(self) -> str:
        return self.proc.env["ROUTER_STATUS_TOKEN"]

    @property
    def redis_prefix(self) -> str:
        return self.proc.env["ROUTER_REDIS_PREFIX"]

    @property
    def var_dir(self) -> Path:
        return self.proc.dir

    @property
    def admin_password(self) -> str:
        """The first-run admin's password. A joining node finds the user in the
        shared database and creates none: read the first node's file."""
        path = Path(self.proc.env["DATABASE_URL"].removeprefix("sqlite:///")).parent / "admin-password"
        return path.read_text().strip()

    def status(self) -> dict:
        return self.proc.status()

    def logs(self) -> str:
        return self.proc.logs()

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """`manage.py ARGS` against this node's database, config and Redis prefix."""
        result = subprocess.run(
            [PY, "manage.py", *args], cwd=ROOT, env=self.proc.env, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise AssertionError(f"manage.py {args[0]} exited {result.returncode}: {result.stderr[-2000:]}")
        return result

    def create_key(self, name: str | None = None, *extra: str) -> tuple[str, str]:
        """(name, plaintext) of a new operator key, once this node's web
        process has applied it (its revision moved past the key's)."""
        name = name or f"key-{uuid.uuid4().hex[:8]}"
        before = int(self.status()["revision"])
        plaintext = self.manage("createapikey", "--name", name, *extra).stdout.strip().splitlines()[-1]
        wait_until(lambda: int(self.status()["revision"]) > before, 30, interval=0.2, what=f"key {name} applied")
        return name, plaintext

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=60)

    def chat(self, key: str, n: int = 1, *, model: str = MODEL, stream: bool = False) -> list[str]:
        """Send n chat completions with the SDK; the reply texts."""
        texts = []
        with self.client(key) as client:
            for i in range(n):
                messages = [{"role": "user", "content": f"hello {i}"}]
                if stream:
                    chunks = client.chat.completions.create(model=model, messages=messages, stream=True)
                    texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
                else:
                    reply = client.chat.completions.create(model=model, messages=messages)
                    texts.append(reply.choices[0].message.content or "")
        return texts


def drop_redis_keys(prefix: str) -> None:
    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
