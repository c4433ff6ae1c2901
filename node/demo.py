"""The demo backends: the fake backends the node itself starts (`make run`,
`manage.py runnode`) for each backend of its config at their addresses.

Invariants:
- One table, `DEMO_BACKENDS`: each entry is the `python -m` argv of one fake
  (`fakes.<fake> --port P --name N --models …`); its port is the address a
  config names to get it.
- A backend is started by the node when its URL is plain `http` on
  127.0.0.1 or localhost at a demo port, whatever the config file is called
  (a copy of the demo config keeps its backends).
- The product never imports `fakes`: the node runs them as processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit

__all__ = ["DEMO_BACKENDS", "demo_backends", "started_by_node"]

DEMO_BACKENDS = [
    ["fakes.openai_backend", "--port", "18001", "--name", "demo-openai-a", "--models", "demo-chat,demo"],
    ["fakes.openai_backend", "--port", "18002", "--name", "demo-openai-b", "--models", "demo-chat,demo"],
    ["fakes.ollama_backend", "--port", "18434", "--name", "demo-ollama", "--models", "llama3.2"],
]
_PORTS = {int(argv[2]) for argv in DEMO_BACKENDS}


class _HasUrl(Protocol):
    url: str | None


def _demo_port(url: str | None) -> int | None:
    parts = urlsplit(url or "")
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme == "http" and parts.hostname in {"127.0.0.1", "localhost"} and port in _PORTS:
        return port
    return None


def started_by_node(url: str | None) -> bool:
    """Whether the node starts the backend at `url` (a demo backend)."""
    return _demo_port(url) is not None


def demo_backends(backends: Iterable[_HasUrl]) -> list[list[str]]:
    """The argvs of the demo backends `backends` point at, in table order."""
    wanted = {_demo_port(b.url) for b in backends}
    return [argv for argv in DEMO_BACKENDS if int(argv[2]) in wanted]
