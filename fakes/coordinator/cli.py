"""``python -m fakes.coordinator``: serve the fake in the foreground.

``python -m fakes.coordinator router …`` / ``endpoint …`` instead drive a
running fake over HTTP (``router_cli``); ``serve`` may be named explicitly.

Secrets come from ``--api-secret`` / ``--jwt-secret`` or the environment
(``APPPROXY_API_SECRET`` / ``APPPROXY_JWT_SECRET``); without both it exits
with status 2, and it never prints them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from aiohttp import web

from appproxy.envelope import CHANNEL

from . import router_cli
from .server import make_app

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else list(argv)
    if args_in and args_in[0] in ("router", "endpoint"):
        raise SystemExit(router_cli.main(args_in))
    if args_in and args_in[0] == "serve":
        args_in = args_in[1:]
    parser = argparse.ArgumentParser(
        prog="python -m fakes.coordinator",
        description="A fake Backend.AI AppProxy coordinator (for tests and demos).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=10200)
    parser.add_argument("--api-secret", default=os.environ.get("APPPROXY_API_SECRET"))
    parser.add_argument("--jwt-secret", default=os.environ.get("APPPROXY_JWT_SECRET"))
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/4")
    parser.add_argument("--channel", default=CHANNEL)
    parser.add_argument("--event-format", choices=("payload", "args"), default="payload")
    parser.add_argument("--ack-timeout", type=float, default=15.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=30.0)
    parser.add_argument("--lost-check-interval", type=float, default=15.0)
    parser.add_argument(
        "--no-events",
        action="store_true",
        help="never publish events (like a Traefik-mode coordinator)",
    )
    args = parser.parse_args(args_in)
    if not args.api_secret or not args.jwt_secret:
        parser.error("--api-secret and --jwt-secret (or APPPROXY_API_SECRET / APPPROXY_JWT_SECRET) are required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    app = make_app(
        args.api_secret,
        args.jwt_secret,
        args.redis_url,
        event_format=args.event_format,
        ack_timeout=args.ack_timeout,
        heartbeat_timeout=args.heartbeat_timeout,
        lost_check_interval=args.lost_check_interval,
        emit_events=not args.no_events,
        channel=args.channel,
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        access_log=None,
        print=lambda *_: log.info("fake coordinator on http://%s:%s", args.host, args.port),
    )
