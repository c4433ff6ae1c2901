"""The admin API's error catalogue: every refusal it answers, in the shape
of /v1's (`{"error": {"message", "type", "param", "code"}}`).

Each class has its status, type and code; `api.py` renders every one of
them, and the framework's own refusals (authentication, validation, a
method not allowed) are translated into them at the boundary. Messages
never hold a secret.
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse


class AdminApiError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"
    message = "The admin API failed to handle the request."

    def __init__(self, message: str | None = None, *, param: str | None = None, extra: dict[str, Any] | None = None):
        self.message = message or type(self).message
        self.param = param
        self.extra = extra or {}
        super().__init__(self.message)

    def with_code(self, code: str) -> AdminApiError:
        """The same refusal under a more precise code."""
        self.code = code
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.extra}}

    def response(self) -> JsonResponse:
        answer = JsonResponse(self.to_dict(), status=self.status)
        if self.status == 401:
            answer["WWW-Authenticate"] = 'Bearer realm="admin"'
        return answer


class InvalidRequest(AdminApiError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"
    message = "The request is invalid."


class InvalidConfig(InvalidRequest):
    code = "invalid_config"
    message = "The config document is invalid."


class Unauthenticated(AdminApiError):
    status = 401
    type = "authentication_error"
    code = "invalid_admin_token"
    message = "An admin token (Authorization: Bearer adm-…) or a staff session is required."


class ReadOnlyToken(AdminApiError):
    status = 403
    type = "permission_error"
    code = "read_only_token"
    message = "This admin token is read-only; a change needs a token made without --read-only."


class CsrfFailed(AdminApiError):
    status = 403
    type = "permission_error"
    code = "csrf_failed"
    message = "A change through a staff session needs the CSRF token (X-CSRFToken header)."


class NotStaff(AdminApiError):
    status = 403
    type = "permission_error"
    code = "not_staff"
    message = "This session's user is not staff."


class ReadOnlyResource(AdminApiError):
    status = 403
    type = "permission_error"
    code = "read_only_resource"
    message = "This resource is managed elsewhere and cannot be changed here."


class NotFound(AdminApiError):
    status = 404
    type = "not_found_error"
    code = "not_found"
    message = "No such resource."


class MethodNotAllowed(AdminApiError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"
    message = "This method is not allowed on this path."


class Conflict(AdminApiError):
    status = 409
    type = "conflict_error"
    code = "conflict"
    message = "The resource changed or is in a state that refuses this change."


class VersionConflict(Conflict):
    code = "version_conflict"
    message = "The config changed since the version given in If-Match."


class RedisUnavailable(AdminApiError):
    status = 503
    type = "server_error"
    code = "redis_unavailable"
    message = "Redis is unavailable; nothing was changed. Retry when it is back."


CATALOGUE: tuple[type[AdminApiError], ...] = (
    AdminApiError, InvalidRequest, InvalidConfig, Unauthenticated, ReadOnlyToken, CsrfFailed, NotStaff,
    ReadOnlyResource, NotFound, MethodNotAllowed, Conflict, VersionConflict, RedisUnavailable,
)  # fmt: skip
