"""``python -m fakes.coordinator router …|endpoint …``: drive a running fake.

An HTTP client of the fake's Manager API (``--url``, ``--api-secret`` or
``APPPROXY_API_SECRET``), for demos of ROUTER mode:

- ``router publish --authority A --model M [--alias N …] [--map EP=RATIO …]
  [--control-mode manual]``, ``router unpublish --authority A --model M
  [--strict]``, ``router models --authority A``;
- ``router key put --authority A --key-id K (--key SK | --key-stdin |
  --token-hash HEX) [--models a,b] [--rate-limit N] [--expires ISO]
  [--client-ips CIDR,…] [--display-hint H]``, ``router key delete
  --authority A --key-id K [--strict]``, ``router keys --authority A``;
- ``endpoint create [--endpoint-id UUID] --service-name S --route HOST:PORT
  …`` (a circuit on the fake plus routes to a local backend) and ``endpoint
  delete --endpoint-id UUID``.

A key is hashed here (sha256, lowercase hex); only the hash is sent. Nothing
secret is printed: output is the fake's JSON answer (which never holds a hash
or a token). Exit status: 0 on a 2xx answer, 1 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import orjson


def _print(body: Any, stream: Any = None) -> None:
    (stream or sys.stdout).write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")


def _call(http: httpx.Client, method: str, path: str, **kw: Any) -> tuple[int, Any]:
    resp = http.request(method, path, **kw)
    try:
        body = resp.json()
    except ValueError:
        body = {"status": resp.status_code, "text": resp.text[:200]}
    return resp.status_code, body


def _finish(status: int, body: Any) -> int:
    if 200 <= status < 300:
        _print(body)
        return 0
    _print({"status": status, "error": body}, sys.stderr)
    return 1


def _mapping(text: str) -> dict[str, Any]:
    endpoint, sep, ratio = text.partition("=")
    try:
        uuid.UUID(endpoint)
        return {"endpoint_id": endpoint, "ratio": float(ratio) if sep else 1.0}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ENDPOINT_UUID[=RATIO], got {text!r}") from None


def _route(text: str) -> dict[str, Any]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return {
        "session_id": str(uuid.uuid4()),
        "route_id": str(uuid.uuid4()),
        "kernel_host": host,
        "kernel_port": int(port),
    }


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _hint(key: str) -> str | None:
    return f"…{key[-4:]}" if len(key) >= 16 else None


def _models_path(ns: argparse.Namespace) -> str:
    return f"/v2/routers/{quote(ns.authority, safe='')}/models"


def _keys_path(ns: argparse.Namespace) -> str:
    return f"/v2/routers/{quote(ns.authority, safe='')}/api-keys"


def _strict(ns: argparse.Namespace) -> dict[str, str]:
    return {"strict": "true"} if ns.strict else {}


def cmd_publish(http: httpx.Client, ns: argparse.Namespace) -> int:
    body = {"aliases": ns.alias, "mappings": ns.map, "control_mode": ns.control_mode}
    return _finish(*_call(http, "PUT", f"{_models_path(ns)}/{quote(ns.model, safe='/')}", json=body))


def cmd_unpublish(http: httpx.Client, ns: argparse.Namespace) -> int:
    path = f"{_models_path(ns)}/{quote(ns.model, safe='/')}"
    return _finish(*_call(http, "DELETE", path, params=_strict(ns)))


def cmd_models(http: httpx.Client, ns: argparse.Namespace) -> int:
    return _finish(*_call(http, "GET", _models_path(ns)))


def cmd_keys(http: httpx.Client, ns: argparse.Namespace) -> int:
    return _finish(*_call(http, "GET", _keys_path(ns)))


def cmd_key_put(http: httpx.Client, ns: argparse.Namespace) -> int:
    hint = ns.display_hint
    if ns.token_hash:
        token_hash = ns.token_hash.lower()
    else:
        key = sys.stdin.readline().strip() if ns.key_stdin else ns.key
        if not key:
            _print({"error": "an empty key"}, sys.stderr)
            return 2
        token_hash = hashlib.sha256(key.encode()).hexdigest()
        hint = hint if hint is not None else _hint(key)
    body: dict[str, Any] = {
        "token_hash": token_hash,
        "allowed_models": ns.models,
        "expires_at": ns.expires,
        "rate_limit": ns.rate_limit,
        "display_hint": hint,
    }
    if ns.client_ips is not None:
        body["allowed_client_ips"] = ns.client_ips
    return _finish(*_call(http, "PUT", f"{_keys_path(ns)}/{quote(ns.key_id, safe='')}", json=body))


def cmd_key_delete(http: httpx.Client, ns: argparse.Namespace) -> int:
    path = f"{_keys_path(ns)}/{quote(ns.key_id, safe='')}"
    return _finish(*_call(http, "DELETE", path, params=_strict(ns)))


def cmd_endpoint_create(http: httpx.Client, ns: argparse.Namespace) -> int:
    endpoint_id = ns.endpoint_id or str(uuid.uuid4())
    item = {
        "deployment_id": endpoint_id,
        "service_name": ns.service_name,
        "tags": {
            "session": {"user_uuid": str(uuid.uuid4()), "group_id": str(uuid.uuid4()), "domain_name": "default"},
            "endpoint": {"id": endpoint_id, "runtime_variant": ns.runtime_variant},
        },
        "open_to_public": ns.open_to_public,
    }
    status, body = _call(http, "POST", "/v2/endpoints/bulk", json={"endpoints": [item]})
    url = None
    if status == 200:
        url = body["endpoints"][0]["url"]
    elif status == 503 and "E10001" in str(body):
        # The circuit is kept; no worker acked it in time (none running yet?).
        _print({"warning": "no worker acked the new circuit; it is kept", "error": body}, sys.stderr)
    else:
        return _finish(status, body)
    status, routed = _call(
        http,
        "POST",
        "/v2/endpoints/bulk/routes",
        json={"endpoints": [{"deployment_id": endpoint_id, "routes": ns.route}]},
    )
    if status != 200 or not routed["endpoints"][0]["success"]:
        return _finish(status if status != 200 else 500, routed)
    return _finish(200, {"endpoint_id": endpoint_id, "url": url, "routes": ns.route})


def cmd_endpoint_delete(http: httpx.Client, ns: argparse.Namespace) -> int:
    return _finish(*_call(http, "DELETE", f"/v2/endpoints/{ns.endpoint_id}"))


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("APPPROXY_COORDINATOR_URL", "http://127.0.0.1:10200"))
    common.add_argument("--api-secret", default=os.environ.get("APPPROXY_API_SECRET"))
    common.add_argument("--timeout", type=float, default=60.0, help="HTTP timeout (an ack wait can take ack_timeout)")
    auth = argparse.ArgumentParser(add_help=False)
    auth.add_argument("--authority", required=True)

    parser = argparse.ArgumentParser(
        prog="python -m fakes.coordinator", description="Drive a running fake coordinator."
    )
    top = parser.add_subparsers(dest="group", required=True)

    router = top.add_parser("router", help="ROUTER mode (BEP-1053) publications and keys")
    sub = router.add_subparsers(dest="command", required=True)
    p = sub.add_parser("publish", parents=[common, auth], help="upsert a model publication")
    p.add_argument("--model", required=True)
    p.add_argument("--alias", action="append", default=[])
    p.add_argument("--map", action="append", default=[], type=_mapping, metavar="ENDPOINT_ID[=RATIO]")
    p.add_argument("--control-mode", default="manual")
    p.set_defaults(func=cmd_publish)
    p = sub.add_parser("unpublish", parents=[common, auth], help="remove a publication and its aliases")
    p.add_argument("--model", required=True)
    p.add_argument("--strict", action="store_true")
    p.set_defaults(func=cmd_unpublish)
    sub.add_parser("models", parents=[common, auth], help="list publications").set_defaults(func=cmd_models)
    sub.add_parser("keys", parents=[common, auth], help="list keys (no hashes)").set_defaults(func=cmd_keys)
    key = sub.add_parser("key", help="API keys").add_subparsers(dest="key_command", required=True)
    p = key.add_parser("put", parents=[common, auth], help="upsert a key (hashed here; only the hash is sent)")
    p.add_argument("--key-id", required=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--key", help="the key material (hashed locally with sha256)")
    src.add_argument("--key-stdin", action="store_true", help="read the key material from stdin")
    src.add_argument("--token-hash", help="an already computed sha256 hex")
    p.add_argument("--models", type=_csv, default=[], help="allowed models, comma-separated (empty = all)")
    p.add_argument("--rate-limit", type=int)
    p.add_argument("--expires", help="expires_at, ISO 8601")
    p.add_argument("--client-ips", type=_csv, help="allowed client IPs/CIDRs, comma-separated")
    p.add_argument("--display-hint")
    p.set_defaults(func=cmd_key_put)
    p = key.add_parser("delete", parents=[common, auth], help="revoke a key")
    p.add_argument("--key-id", required=True)
    p.add_argument("--strict", action="store_true", help="wait for every live node's ack")
    p.set_defaults(func=cmd_key_delete)

    endpoint = top.add_parser("endpoint", help="endpoints (circuits) and their routes")
    esub = endpoint.add_subparsers(dest="command", required=True)
    p = esub.add_parser("create", parents=[common], help="create a circuit and point its routes at backends")
    p.add_argument("--endpoint-id")
    p.add_argument("--service-name", required=True)
    p.add_argument("--route", action="append", required=True, type=_route, metavar="HOST:PORT")
    p.add_argument("--runtime-variant", default="vllm")
    p.add_argument("--open-to-public", action="store_true")
    p.set_defaults(func=cmd_endpoint_create)
    p = esub.add_parser("delete", parents=[common], help="delete an endpoint's circuit")
    p.add_argument("--endpoint-id", required=True)
    p.set_defaults(func=cmd_endpoint_delete)
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if not ns.api_secret:
        parser.error("--api-secret (or APPPROXY_API_SECRET) is required")
    headers = {"X-BackendAI-Token": ns.api_secret}
    try:
        with httpx.Client(base_url=ns.url, headers=headers, timeout=ns.timeout) as http:
            return int(ns.func(http, ns))
    except httpx.HTTPError as exc:
        _print({"error": f"{type(exc).__name__} talking to {ns.url}"}, sys.stderr)
        return 1
