"""Authentication (reference §1.2) and the rendering of every error.

Invariants:
- ``X-BackendAI-Token`` must equal ``<api_secret>``, ``Bearer <api_secret>``
  or ``BackendAI <api_secret>`` (compared in constant time); without it,
  ``Authorization: Bearer <jwt>`` must carry a JWT signed HS256 with the api
  secret. Anything else is 401 auth-failed.
- Auth is checked before any handler runs, but not for unknown paths or
  methods: those are 404 url-not-found / 405 method-not-allowed regardless.
- No exception leaves a handler as an HTML page: ``ApiError`` renders its
  body, anything unexpected is logged and becomes a 500 body.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable

import jwt
from aiohttp import web

from .bodies import json_response
from .errors import ApiError, auth_failed, internal_error, method_not_allowed, url_not_found
from .state import CONFIG_KEY

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def check_auth(request: web.Request, api_secret: str) -> None:
    token = request.headers.get("X-BackendAI-Token")
    if token:
        permitted = (api_secret, f"Bearer {api_secret}", f"BackendAI {api_secret}")
        if not any(hmac.compare_digest(token.encode(), p.encode()) for p in permitted):
            raise auth_failed()
        return
    header = request.headers.get("Authorization")
    if not header:
        raise auth_failed()
    method, _, value = header.partition(" ")
    if method.lower() != "bearer":
        raise auth_failed(f"Unsupported authorization method {method}")
    try:
        jwt.decode(value, api_secret, algorithms=["HS256"])
    except jwt.PyJWTError:
        raise auth_failed() from None


@web.middleware
async def errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        if request.match_info.http_exception is None:
            check_auth(request, request.app[CONFIG_KEY].api_secret)
        return await handler(request)
    except ApiError as exc:
        return _render(exc)
    except web.HTTPNotFound:
        return _render(url_not_found())
    except web.HTTPMethodNotAllowed:
        return _render(method_not_allowed())
    except web.HTTPException:
        raise
    except Exception:
        log.exception("fake coordinator: internal error")
        return _render(internal_error())


def _render(error: ApiError) -> web.Response:
    return json_response(error.body, error.status)
