"""The web process on uvicorn when it listens on a Unix socket (router/listen.py).

    python -m config.serve --host 127.0.0.1 --port 8000 --unix /run/router/router.sock \\
        --unix-mode 0660 [--no-tcp] [--workers N] [--timeout-graceful-shutdown S]

uvicorn's own command listens on one address; this binds both sockets
itself (TCP as uvicorn would; the Unix socket with its mode, a dead
server's file removed first) and hands them to uvicorn's server (or, with
several workers, to its process supervisor, every worker serving both).
The options are the ones `runnode` gives `python -m uvicorn` (the protocol
class of config/server.py, uvloop, no access log, no proxy headers). The
socket file is removed when the server stops. A node that listens on TCP
alone keeps `python -m uvicorn`.
"""

from __future__ import annotations

import argparse
import sys

import uvicorn
from uvicorn.supervisors import Multiprocess

from router import listen

STARTUP_FAILURE = 3  # uvicorn's own exit code for a server that could not start


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m config.serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-tcp", dest="tcp", action="store_false", help="the Unix socket alone")
    parser.add_argument("--unix", required=True, help="the socket's path")
    parser.add_argument("--unix-mode", default=oct(listen.DEFAULT_MODE), type=listen.parse_mode)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout-graceful-shutdown", type=int, default=None)
    parser.add_argument("--log-level", default="warning")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = uvicorn.Config(
        "config.asgi:application",
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="config.server:HttpToolsProtocol",
        access_log=False,
        log_level=args.log_level,
        timeout_graceful_shutdown=args.timeout_graceful_shutdown,
        proxy_headers=False,
        workers=args.workers,
    )
    sockets = []
    try:
        if args.tcp:
            sockets.append(config.bind_socket())
        sockets.append(listen.bind(args.unix, args.unix_mode))
    except OSError as exc:
        for sock in sockets:
            sock.close()
        print(f"router: cannot listen: {exc}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)
    server = uvicorn.Server(config)
    try:
        if config.workers > 1:
            Multiprocess(config, sockets=sockets).run()
        else:
            server.run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    finally:
        for sock in sockets:
            sock.close()
        listen.remove_socket(args.unix)
    if config.workers == 1 and not server.started:
        sys.exit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
