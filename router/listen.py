"""Where a node's web server listens: TCP, a Unix socket, or both.

`ROUTER_LISTEN` (else the YAML's `server.listen`) is a list of `tcp` (the
node's host and port: `ROUTER_HOST` / `ROUTER_PORT`, `--host` / `--port`)
and `unix:/absolute/path`; the socket file's mode is
`ROUTER_UNIX_SOCKET_MODE` (else `server.unix_socket_mode`, 0660).

Invariants:
- A socket file left by a server that died (nobody accepts on it) is
  removed before the server binds; a socket something still accepts on is
  a start failure, never taken over; a path that is not a socket is never
  removed.
- The socket file is removed when the server stops (`remove_socket`: only
  a socket, so a file put there since survives).
- A client of the socket has no address: IP-based rules (key and circuit
  allow-lists, `trusted_proxies`) do not apply to it (router/core/ipnets.py);
  the file's mode and directory decide who may connect.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TCP = "tcp"
UNIX = "unix:"
DEFAULT_MODE = 0o660
# sun_path is 108 bytes on Linux, its last one the terminating NUL.
MAX_PATH_BYTES = 107


@dataclass(frozen=True, slots=True)
class Listen:
    tcp: bool = True
    unix: str | None = None  # the socket's path
    mode: int = DEFAULT_MODE


def parse_items(items: Iterable[str]) -> tuple[bool, str | None]:
    """(TCP on, the Unix socket path) from `tcp` / `unix:/path` items;
    ValueError naming the item otherwise."""
    tcp, unix = False, None
    listed = [item.strip() for item in items if item.strip()]
    if not listed:
        raise ValueError("list at least one of: tcp, unix:/path/to/socket")
    for item in listed:
        if item == TCP:
            tcp = True
        elif item.startswith(UNIX):
            path = item[len(UNIX) :]
            if not path.startswith("/"):
                raise ValueError(f"{item!r}: the socket path must be absolute (unix:/run/router/router.sock)")
            if len(os.fsencode(path)) > MAX_PATH_BYTES or "\0" in path:
                raise ValueError(f"{item!r}: a socket path is at most {MAX_PATH_BYTES} bytes, without NUL")
            if unix is not None and unix != path:
                raise ValueError(f"{item!r}: one Unix socket per node (already {UNIX}{unix})")
            unix = path
        else:
            raise ValueError(f"{item!r} is neither tcp nor unix:/path")
    return tcp, unix


def parse_mode(value: str | int) -> int:
    """A file mode: an int (YAML reads 0660 as octal already) or an octal
    string (`'0660'`, `'660'`, `'0o660'`)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a file mode")
    if isinstance(value, int):
        mode = value
    else:
        text = value.strip().lower().removeprefix("0o")
        try:
            mode = int(text, 8)
        except ValueError:
            raise ValueError(f"{value!r} is not an octal file mode like 0660") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"{value!r} is not a file mode (0 to 0777)")
    return mode


def resolve(env: Mapping[str, str], listen: Iterable[str] | None, mode: str | int | None) -> Listen:
    """The node's listen addresses: the environment's, else the YAML's
    (`listen`, `mode`: the `server` section's), else TCP alone."""
    raw = (env.get("ROUTER_LISTEN") or "").strip()
    try:
        tcp, unix = parse_items(raw.split(",")) if raw else parse_items(listen or [TCP])
    except ValueError as exc:
        raise ValueError(f"{'ROUTER_LISTEN' if raw else 'server.listen'}: {exc}") from None
    raw_mode = (env.get("ROUTER_UNIX_SOCKET_MODE") or "").strip()
    try:
        resolved = parse_mode(raw_mode) if raw_mode else parse_mode(DEFAULT_MODE if mode is None else mode)
    except ValueError as exc:
        raise ValueError(f"{'ROUTER_UNIX_SOCKET_MODE' if raw_mode else 'server.unix_socket_mode'}: {exc}") from None
    return Listen(tcp=tcp, unix=unix, mode=resolved)


def accepts(path: str, timeout: float = 0.5) -> bool:
    """True when something accepts connections on the socket at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def clear_stale(path: str) -> None:
    """Remove a dead server's socket file at `path`; OSError (naming the
    path and what to do) when something still serves on it or the path is
    not a socket."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(f"{path} exists and is not a socket; remove it or choose another path")
    if accepts(path):
        raise OSError(f"{path}: another server accepts connections on this socket; stop it or choose another path")
    os.unlink(path)


def bind(path: str, mode: int) -> socket.socket:
    """A listening Unix socket at `path` (a stale file removed first) with `mode`."""
    clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o777 & ~mode)  # never, not even until the chmod, wider than `mode`
    try:
        sock.bind(path)
        os.chmod(path, mode)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(umask)
    return sock


def remove_socket(path: str) -> None:
    """Remove the socket file at `path`, if it is still a socket."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
