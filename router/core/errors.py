"""The one error catalogue: every failure a client can see, OpenAI-shaped.

Each class carries its HTTP status, OpenAI `type` and `code`. Raise them
anywhere on the request path; the view boundary renders `to_body()`.
Messages never contain secrets (keys, tokens, hashes).
"""

from __future__ import annotations

import orjson


class RouterError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = "internal_error"
    message: str = "The router failed to handle the request."

    def __init__(
        self,
        message: str | None = None,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.message = message or type(self).message
        self.param = param
        self.headers = headers or {}
        # The API key the refusal is about, when one was identified (a
        # rate-limited or IP-refused key): for the observation, never the client.
        self.key: object | None = None
        super().__init__(self.message)

    def to_dict(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_body(self) -> bytes:
        return orjson.dumps(self.to_dict())

    def to_sse(self) -> bytes:
        """The event that ends a stream which failed after its first byte."""
        return b"data: " + self.to_body() + b"\n\n"


# 400
class InvalidRequest(RouterError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"
    message = "The request is invalid."


class InvalidJSON(InvalidRequest):
    code = "invalid_json"
    message = "The request body is not valid JSON."


class MissingModel(InvalidRequest):
    code = "missing_model"
    message = "You must provide a model parameter."


class UnsupportedParameter(InvalidRequest):
    code = "unsupported_parameter"
    message = "A parameter is not supported by the selected provider."


class UnsupportedEndpoint(InvalidRequest):
    code = "unsupported_endpoint"
    message = "The selected provider does not serve this endpoint."


class DuplicateKey(InvalidRequest):
    code = "duplicate_key"
    message = "The request body has a top-level key more than once."


class PathSelectorRejected(InvalidRequest):
    code = "invalid_request"
    message = "The execution path is chosen by the router, not by the client."


# 401
class MissingApiKey(RouterError):
    status = 401
    type = "invalid_request_error"
    code = "missing_api_key"
    message = (
        "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' "
        "or 'x-api-key: <key>'."
    )


class InvalidApiKey(RouterError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
    message = "Incorrect API key provided."


class ExpiredApiKey(InvalidApiKey):
    code = "expired_api_key"
    message = "The API key has expired."


class InvalidToken(RouterError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_token"
    message = "The bearer token for this endpoint is missing or invalid."


# 403
class PermissionDenied(RouterError):
    status = 403
    type = "permission_error"
    code = "permission_denied"
    message = "You are not allowed to perform this request."


class ModelNotAllowed(PermissionDenied):
    code = "model_not_allowed"
    message = "This API key is not allowed to use the requested model."


class ClientIpNotAllowed(PermissionDenied):
    code = "ip_not_allowed"
    message = "Client address not allowed."


class CorsNotAllowed(PermissionDenied):
    """A CORS preflight whose origin, method or headers `cors` does not allow."""

    code = "cors_not_allowed"
    message = "This cross-origin request is not allowed."


# 404
class NotFound(RouterError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"
    message = "Unknown path."


class ModelNotFound(NotFound):
    code = "model_not_found"
    message = "The requested model does not exist."


class FileNotFound(NotFound):
    code = "file_not_found"
    message = "No such file."


class ResponseNotFound(NotFound):
    code = "response_not_found"
    message = "No such stored response."


class PreviousResponseNotFound(NotFound):
    code = "previous_response_not_found"
    message = "The previous response was not found."


class BatchNotFound(NotFound):
    code = "batch_not_found"
    message = "No such batch."


class EndpointNotFound(NotFound):
    code = "endpoint_not_found"
    message = "No endpoint is registered for this host."


# 405
class MethodNotAllowed(RouterError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"
    message = "Method not allowed."


# 413
class BatchNotCancellable(RouterError):
    status = 409
    type = "invalid_request_error"
    code = "batch_not_cancellable"
    message = "The batch has ended and can no longer be cancelled."


class RequestTooLarge(RouterError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"
    message = "The request body is larger than the router accepts."


class FileTooLarge(RequestTooLarge):
    code = "file_too_large"
    message = "The file is larger than the router accepts."


class FileQuotaExceeded(RequestTooLarge):
    code = "file_quota_exceeded"
    message = "The file would take this API key past its total file storage."


class FileCountExceeded(RequestTooLarge):
    code = "file_count_exceeded"
    message = "This API key holds as many files as it may; delete some first."


# 415
class UnsupportedMediaType(RouterError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"
    message = "The request body must be JSON: send 'Content-Type: application/json'."


# 429
class RateLimited(RouterError):
    status = 429
    type = "requests"
    code = "rate_limit_exceeded"
    message = "Rate limit reached for this API key."


class TooManyBatches(RouterError):
    status = 429
    type = "requests"
    code = "too_many_batches"
    message = "This API key has as many unfinished batches as it may; wait for one to end, or cancel one."


class UpstreamQuotaExhausted(RouterError):
    status = 429
    type = "requests"
    code = "upstream_quota_exceeded"
    message = "Every backend of this model is at its upstream quota; retry later."


class CapacityExhausted(RouterError):
    status = 429
    type = "server_overloaded"
    code = "capacity_exhausted"
    message = "Every provider of this model is at capacity; retry later."


# 5xx
class UpstreamError(RouterError):
    status = 502
    type = "server_error"
    code = "upstream_error"
    message = "The upstream provider failed."


class UpstreamResponseTooLarge(UpstreamError):
    code = "upstream_response_too_large"
    message = "The upstream answer is larger than the router relays (server.max_response_bytes)."


class UpstreamBadResponse(UpstreamError):
    code = "upstream_bad_response"
    message = "The upstream answer is not what the endpoint promises (content type, framing, or cut short)."


class PrefillFailed(UpstreamError):
    """Disaggregated prefill/decode: every prefill replica tried failed and
    no unified (`both`) replica could serve the request instead."""

    code = "prefill_failed"
    message = "The prefill phase failed on every prefill replica tried."


class DecodeFailed(UpstreamError):
    """Disaggregated prefill/decode: every decode replica tried failed before its first byte."""

    code = "decode_failed"
    message = "The decode phase failed on every decode replica tried."


class NoBackendAvailable(RouterError):
    status = 503
    type = "server_error"
    code = "no_backend_available"
    message = "No healthy backend is available for this model."


class PhaseUnavailable(NoBackendAvailable):
    """Disaggregated prefill/decode: no healthy replica of a phase (and no unified one)."""

    code = "phase_unavailable"
    message = "No healthy replica of a phase (prefill or decode) is available for this model."


class TooManyUploads(RouterError):
    status = 503
    type = "server_error"
    code = "too_many_uploads"
    message = "This router process is taking as many uploads as it may at once; retry shortly."


class NotReady(RouterError):
    status = 503
    type = "server_error"
    code = "not_ready"
    message = "The router has not loaded its routing state yet."


class ShuttingDown(RouterError):
    """The web process stopped before the answer was done: its graceful
    stop's grace (ROUTER_STOP_GRACE) ran out. As a status (nothing was sent
    yet) or as the event that ends a stream the stop cut."""

    status = 503
    type = "server_error"
    code = "server_shutting_down"
    message = "The router is shutting down; retry the request."


class UpstreamTimeout(RouterError):
    status = 504
    type = "server_error"
    code = "upstream_timeout"
    message = "The upstream provider did not answer in time."


def catalogue() -> list[type[RouterError]]:
    """Every concrete error class (the parametrised test walks them all)."""
    seen: list[type[RouterError]] = []
    stack = [RouterError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen


class BodyNotKept(RouterError):
    """A body the router must keep to send (a spooled form) could not be
    written where it is kept (router/spool.py: ROUTER_SPOOL_DIR)."""

    status = 503
    type = "server_error"
    code = "request_body_not_kept"
    message = "The router could not keep the request body to send it upstream; retry shortly."


class BodiesPending(RouterError):
    status = 503
    type = "server_error"
    code = "request_bodies_pending"
    message = "The router is receiving too many request bodies at once; retry shortly."
