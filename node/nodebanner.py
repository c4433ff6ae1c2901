"""What `runnode` (`make run`) prints once its node has started: one block
naming every address, the login, the config file and where the logs are.

It names the password file, never the password. The addresses use a host a
browser on this machine can open (127.0.0.1 for a node listening on every
interface, which the block then says).
"""

from __future__ import annotations

from pathlib import Path

from node.supervisor import ChildSpec


def started_names(specs: list[ChildSpec], workers: int) -> str:
    """'web, tasks, beat, 3 demo backends': what runnode starts, in a line."""
    names = [f"web ({workers} workers)" if s.name == "web" and workers > 1 else s.name
             for s in specs if not s.name.startswith("demo ")]
    demos = len(specs) - len(names)
    return ", ".join(names + ([f"{demos} demo backend{'s' if demos > 1 else ''}"] if demos else []))


def ready_block(*, host: str, port: int, started: str, admin: str, config: Path, logs: str,
                namespace: str, tcp: bool = True, unix: str | None = None) -> str:
    """What the terminal shows once the node has started: where everything is."""
    shown = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)
    base = f"http://{shown}:{port}" if tcp else "http://localhost"
    rows = [
        ("API (/v1)", f"{base}/v1" + ("" if tcp else "  (over the Unix socket)")),
        ("dashboard", f"{base}/dashboard/"),
        ("admin", f"{base}/admin/"),
        ("metrics", f"{base}/metrics"),
        ("liveness", f"{base}/livez"),
        ("readiness", f"{base}/readyz"),
        ("status", f"{base}/status  (a staff session or ROUTER_STATUS_TOKEN)"),
    ]
    if tcp and host in ("0.0.0.0", "", "::"):
        rows.append(("listening on", f"{host or '0.0.0.0'} port {port} (every interface)"))
    if unix is not None:
        rows.append(("Unix socket", f"{unix}  (curl --unix-socket {unix} http://localhost/v1/models)"))
    rows += [
        ("sign in as", admin),
        ("config", f"{config}  (edits apply without a restart)"),
        ("logs", logs),
        ("Redis namespace", repr(namespace)),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"router: ready: {started} started", *(f"  {label.ljust(width)}  {value}" for label, value in rows)]
    return "\n" + "\n".join(lines) + "\n\nrouter: Ctrl-C stops everything"
