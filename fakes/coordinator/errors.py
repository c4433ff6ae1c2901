"""The coordinator's error catalogue (reference §1.5).

Every error body is ``{"type", "title", "error_code"}`` in that order, plus
``msg`` and ``data`` only when given; ``type`` is a URL under ``PROBS``. The
middleware renders an ``ApiError`` as its ``body`` with its ``status``.
"""

from __future__ import annotations

from typing import Any

PROBS = "https://api.backend.ai/probs/"


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        type_: str,
        title: str,
        error_code: str,
        msg: str | None = None,
        data: Any = None,
    ) -> None:
        super().__init__(msg or title)
        self.status = status
        self.body: dict[str, Any] = {
            "type": type_,
            "title": title,
            "error_code": error_code,
        }
        if msg is not None:
            self.body["msg"] = msg
        if data is not None:
            self.body["data"] = data


def auth_failed(msg: str = "Unauthorized access") -> ApiError:
    return ApiError(
        401,
        PROBS + "auth-failed",
        "Credential/signature mismatch.",
        "agent_auth_unauthorized",
        msg,
    )


def not_found(what: str) -> ApiError:
    return ApiError(
        404,
        PROBS + "object-not-found",
        f"E00002: No such {what}.",
        "agent_read_not-found",
    )


def invalid(msg: str, errors: Any = None) -> ApiError:
    return ApiError(
        400,
        PROBS + "invalid-api-params",
        "Missing or invalid API parameters.",
        "agent_request_invalid-parameters",
        msg,
        {"errors": errors} if errors is not None else None,
    )


def port_not_available() -> ApiError:
    return ApiError(
        409,
        PROBS + "appproxy/port-not-available",
        "Designated port already occupied.",
        "agent_setup_already-exists",
    )


def worker_not_responding(authority: str) -> ApiError:
    return ApiError(
        503,
        PROBS + "service-unavailable",
        "Service unavailable.",
        "agent_generic_unavailable",
        "E10001: Proxy worker not responding",
        {"worker": authority},
    )


def worker_not_available() -> ApiError:
    return ApiError(
        503,
        PROBS + "appproxy/worker-not-available",
        "Worker not available.",
        "agent_access_not-found",
    )


def url_not_found() -> ApiError:
    return ApiError(404, PROBS + "url-not-found", "Unknown URL path.", "agent_request_not-found")


def method_not_allowed() -> ApiError:
    return ApiError(405, PROBS + "method-not-allowed", "HTTP Method Not Allowed.", "agent_request_bad-request")


def internal_error() -> ApiError:
    return ApiError(500, PROBS + "internal-server-error", "Internal server error.", "agent_generic_internal-error")
