"""The coordinator's worker-facing REST API (reference §1), synchronous.

Invariants:
- Every call carries ``X-BackendAI-Token: <api_secret>`` and a fresh
  ``X-BackendAI-RequestID`` (uuid4), as the stock worker does.
- httpx errors are translated at this boundary: connect errors, timeouts and
  5xx become ``CoordinatorUnavailable`` (retry with backoff); 404 on a worker
  path becomes ``WorkerNotFound`` (register again); any other non-2xx is a
  ``CoordinatorError``. No message ever contains the secret (the header is
  never formatted; only method, path, status and the coordinator's title).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import httpx
import orjson

from router.core.secret import Secret

from .wire import Circuit, WorkerInfo, WorkerRegistration, parse_circuits

__all__ = [
    "CoordinatorClient",
    "CoordinatorError",
    "CoordinatorUnavailable",
    "WorkerNotFound",
    "client_for",
]


class CoordinatorError(Exception):
    """A refused call (4xx other than a missing worker, or a bad answer)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class CoordinatorUnavailable(CoordinatorError):
    """Unreachable, timed out, or 5xx: try again later."""


class WorkerNotFound(CoordinatorError):
    """The coordinator does not know our worker id (any more)."""


def _describe(response: httpx.Response) -> tuple[str, str | None]:
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase or "error", None
    if not isinstance(body, dict):
        return response.reason_phrase or "error", None
    title = " ".join(str(body[k]) for k in ("title", "msg") if body.get(k))
    return title or response.reason_phrase or "error", body.get("error_code")


NOT_MODIFIED = object()  # router_config() on 304


class CoordinatorClient:
    def __init__(
        self,
        base_url: str,
        api_secret: Secret,
        *,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not api_secret:
            raise ValueError("api_secret is required")
        self._secret = api_secret
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 3.0)),
            transport=transport,
            trust_env=False,
        )

    def __repr__(self) -> str:
        return f"<CoordinatorClient {self._http.base_url}>"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        worker_path: bool = False,
        params: dict[str, str] | None = None,
        allow_304: bool = False,
        raw: bool = False,
    ) -> Any:
        headers = {
            "X-BackendAI-Token": self._secret.reveal(),
            "X-BackendAI-RequestID": str(uuid.uuid4()),
            "Accept": "application/json",
        }
        content = None
        if body is not None:
            content = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(method, path, content=content, headers=headers, params=params)
        except httpx.TimeoutException as exc:
            raise CoordinatorUnavailable(f"{method} {path}: timed out") from exc
        except httpx.HTTPError as exc:
            raise CoordinatorUnavailable(f"{method} {path}: {type(exc).__name__}") from exc
        if response.status_code == 304 and allow_304:
            return NOT_MODIFIED
        if response.status_code == 200:
            if raw:
                return response.content
            try:
                return orjson.loads(response.content)
            except ValueError as exc:
                raise CoordinatorError(f"{method} {path}: the answer is not JSON", status=200) from exc
        title, code = _describe(response)
        message = f"{method} {path}: {response.status_code} {title}"
        if response.status_code == 404 and worker_path:
            raise WorkerNotFound(message, status=404, code=code)
        if response.status_code >= 500:
            raise CoordinatorUnavailable(message, status=response.status_code, code=code)
        raise CoordinatorError(message, status=response.status_code, code=code)

    # -- the worker API ----------------------------------------------------
    def register(self, registration: WorkerRegistration) -> WorkerInfo:
        """``PUT /api/worker``: registers, or re-registers the same authority."""
        data = self._call("PUT", "/api/worker", registration.to_body())
        try:
            return WorkerInfo.model_validate(data)
        except ValueError as exc:
            raise CoordinatorError("PUT /api/worker: the answer has no worker id") from exc

    def register_router(self, body: dict[str, Any]) -> WorkerInfo:
        """``PUT /api/worker`` with the ROUTER body (router_mode/wire.py: router_registration)."""
        data = self._call("PUT", "/api/worker", body)
        try:
            return WorkerInfo.model_validate(data)
        except ValueError as exc:
            raise CoordinatorError("PUT /api/worker: the answer has no worker id") from exc

    def router_config(self, worker_id: str, known_revision: str | None) -> Any:
        """``GET /api/worker/{id}/router-config[?known_revision=r]``: the JSON
        snapshot, or ``NOT_MODIFIED`` on 304."""
        params = {"known_revision": known_revision} if known_revision is not None else None
        return self._call(
            "GET", f"/api/worker/{worker_id}/router-config", worker_path=True, params=params, allow_304=True
        )

    def heartbeat(self, worker_id: str, node_id: str | None = None) -> WorkerInfo | None:
        """``PATCH /api/worker/{id}``; ``WorkerNotFound`` means register again.

        A ROUTER node sends its ``node_id`` as the JSON body and as a query
        parameter (the BEP leaves the transport open; a coordinator reads one)."""
        if node_id:
            data = self._call(
                "PATCH",
                f"/api/worker/{worker_id}",
                {"node_id": node_id},
                worker_path=True,
                params={"node_id": node_id},
            )
        else:
            data = self._call("PATCH", f"/api/worker/{worker_id}", worker_path=True)
        try:
            return WorkerInfo.model_validate(data)
        except ValueError:
            return None

    def deregister(self, worker_id: str, node_id: str | None = None) -> None:
        """``DELETE /api/worker/{id}``; a ROUTER node names itself (body and
        query, like the heartbeat) so only this node leaves the authority."""
        if node_id:
            self._call(
                "DELETE", f"/api/worker/{worker_id}", {"node_id": node_id}, worker_path=True, params={"node_id": node_id}
            )
        else:
            self._call("DELETE", f"/api/worker/{worker_id}", worker_path=True)

    def circuits(self, worker_id: str) -> tuple[list[Circuit], set[str], list[str]]:
        """Every circuit of the worker: (parsed, ids of items that failed to
        parse, errors). A failed item is kept as it was in the mirror rather
        than removed, so one odd circuit never tears down a working one."""
        return parse_circuit_items(self.circuit_items(worker_id)[0])

    def circuit_body(self, worker_id: str) -> CircuitBody:
        """``GET /api/worker/{id}/circuits`` as received: its digest now, the
        items only when asked (a pull that finds the digest it applied last
        skips parsing several MB of JSON)."""
        path = f"/api/worker/{worker_id}/circuits"
        return CircuitBody(self._call("GET", path, worker_path=True, raw=True), f"GET {path}")

    def circuit_items(self, worker_id: str) -> tuple[list[Any], str]:
        """The circuits as received, unparsed, and a digest of the answer."""
        body = self.circuit_body(worker_id)
        return body.items(), body.digest


def client_for(settings: Any) -> CoordinatorClient:
    """A client for the coordinator a section names (either mode's)."""
    return CoordinatorClient(settings.coordinator_url, settings.api_secret, timeout=settings.request_timeout)


class CircuitBody:
    """One circuits answer: the SHA-256 of its bytes, and its items parsed on demand.

    The digest is of the bytes, not of the parsed items: the same state sent
    twice is the same bytes from one coordinator; if it were not (another key
    order), the pull only takes the full path, never a wrong one."""

    __slots__ = ("_raw", "_what", "digest")

    def __init__(self, raw: bytes, what: str) -> None:
        self._raw = raw
        self._what = what
        self.digest = hashlib.sha256(raw).hexdigest()

    def items(self) -> list[Any]:
        try:
            data = orjson.loads(self._raw)
        except ValueError as exc:
            raise CoordinatorError(f"{self._what}: the answer is not JSON", status=200) from exc
        items = data.get("circuits") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise CoordinatorError(f"{self._what}: no 'circuits' list")
        return items


def parse_circuit_items(items: list[Any]) -> tuple[list[Circuit], set[str], list[str]]:
    """(parsed circuits, ids of the items that failed to parse, errors).

    The items are given away (decoded from one answer for this parse): each
    circuit keeps its item as its raw mapping, so the caller must not change
    them after."""
    good: list[Circuit] = []
    failed: set[str] = set()
    errors: list[str] = []
    for item in items:
        parsed, problems = parse_circuits([item], owned=True)
        good.extend(parsed)
        if problems:
            errors.extend(problems)
            if isinstance(item, dict) and item.get("id") is not None:
                failed.add(str(item["id"]).lower())
    return good, failed, errors
