"""Django for the /v1 hot path: no middleware, no per-request thread hops.

Stock `ASGIHandler` runs every `MiddlewareMixin` middleware (sessions, CSRF,
auth, messages…) through `sync_to_async`, opens a per-request
`ThreadSensitiveContext` executor, and closes each response in a thread:
measured at ~1.5 ms of CPU per request on this stack (docs/performance.md).
The /v1 views are async end to end, never touch the DB and need none of that
middleware, so the ASGI entry point sends them here: the same URLconf, the
same views, Django's request/response objects and disconnect handling.

The seam with Django is `LeanASGIHandler` and nothing else: it overrides
`load_middleware` (an empty chain for this handler only; `settings.MIDDLEWARE`
is neither read nor written, so the full-Django app in config.asgi keeps its
middleware), `__call__` (no `ThreadSensitiveContext`), `handle` and
`read_body` (Django's, minus the thread hops, plus the body limit). It calls
Django's `create_request`, `run_get_response`, `send_response`,
`listen_for_disconnect` and `get_script_prefix` unchanged.
`tests/config/test_lean.py` pins each of these against the Django versions in
`DJANGO_CHECKED` and fails, naming what to re-read, when Django changes them.
"""

from __future__ import annotations

import asyncio
import io
import tempfile

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.urls import set_script_prefix

from config import server
from router.frontends.direct import body_limit, declared_length, send_too_large
from router.frontends.responses import RoutedStream, stopped_response

# The Django releases this handler was read against: [from, to). Outside it,
# tests/config/test_lean.py fails until someone re-reads Django's handlers.
DJANGO_CHECKED = ((5, 2), (6, 0))


class LeanASGIHandler(ASGIHandler):
    # A body already in memory goes to the server in one message up to this
    # size (Django's 64 KiB cut a 2,000-model /v1/models list in three).
    chunk_size = 1 << 20

    def load_middleware(self, is_async: bool = False) -> None:
        """The chain `BaseHandler.load_middleware` builds for an empty
        MIDDLEWARE, built for this handler alone: no middleware lists, the
        view call wrapped once in Django's exception-to-response conversion.
        (`ASGIHandler.__init__` calls this with is_async=True.)"""
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        get_response = self._get_response_async if is_async else self._get_response
        self._middleware_chain = convert_exception_to_response(get_response)

    async def __call__(self, scope, receive, send) -> None:
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send, admit: server.Limits | None = None) -> None:
        """Django's `handle` for one request. With `admit` (a `/v1` request,
        config/asgi.py) the request takes an admission slot once its body is
        whole, and keeps it until it is answered."""
        limit = body_limit()
        if declared_length(scope) > limit:
            # Refuse before reading a byte: a huge body never reaches memory or disk.
            await send_too_large(send, limit)
            return
        try:
            body_file = await self.read_body(receive, limit)
        except RequestAborted:
            return
        except _TooLarge:
            await send_too_large(send, limit)
            return
        if admit is None:
            await self._respond(scope, receive, send, body_file)
            return
        if not server.admission.try_enter(admit.max_concurrent):
            body_file.close()
            await server.send_overloaded(send, admit)
            return
        try:
            await self._respond(scope, receive, send, body_file)
        finally:
            server.admission.leave()

    async def _respond(self, scope, receive, send, body_file) -> None:
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            return

        answer: list = []  # the view's response, once it has one

        async def process_request() -> object:
            response = await self.run_get_response(request)
            answer.append(response)
            if not (response.streaming or response.status_code in (204, 304) or response.has_header("Content-Length")):
                # What CommonMiddleware does on Django's full path: a length,
                # not chunked framing, for a body that is already whole.
                response.headers["Content-Length"] = str(len(response.content))
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass
            return response

        # As Django does: a client disconnect cancels the view / the stream.
        listener = asyncio.create_task(self.listen_for_disconnect(receive))
        worker = asyncio.create_task(process_request())
        try:
            await asyncio.wait((listener, worker), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Not the client's (that ends the listener): the server stops (or a
            # send deadline could not abort its transport, config/deadlines.py).
            listener.cancel()
            await _stopped(self, scope, send, worker, answer)
            body_file.close()
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            return
        for task in (listener, worker):
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if not worker.cancelled() and worker.exception() is None:
            worker.result().close()  # cheap: no DB connection lives on this thread
        body_file.close()

    async def read_body(self, receive, limit: int | None = None):  # type: ignore[override]
        """Django's read_body, stopping as soon as the body passes `limit`.

        As Django's, at most FILE_UPLOAD_MAX_MEMORY_SIZE is held in memory and
        a larger body spills to a temporary file; a body within it (every
        usual request) is a plain BytesIO, without the spooled file's wrapper."""
        in_memory = settings.FILE_UPLOAD_MAX_MEMORY_SIZE
        chunks: list[bytes] = []
        body_file = None
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if body_file is not None:
                    body_file.close()
                raise RequestAborted()
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if limit is not None and size > limit:
                    if body_file is not None:
                        body_file.close()
                    raise _TooLarge()
                if body_file is not None:
                    body_file.write(chunk)
                elif size > in_memory:
                    body_file = tempfile.SpooledTemporaryFile(max_size=in_memory, mode="w+b")
                    body_file.write(b"".join(chunks))
                    body_file.write(chunk)
                    chunks = []
                else:
                    chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if body_file is None:
            return io.BytesIO(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        body_file.seek(0)
        return body_file


class _TooLarge(Exception):
    pass


async def _stopped(handler: LeanASGIHandler, scope, send, worker: asyncio.Task, answer: list) -> None:
    """End a request the server's stop cut, as the direct paths do
    (router/frontends/direct.py): a relayed stream ends with its door's error
    event (`RoutedStream.stop`), a request with no answer yet gets a 503
    `server_shutting_down` in its door's shape, an answer under way
    otherwise just ends."""
    if answer and isinstance(answer[0], RoutedStream):
        answer[0].stop()
    worker.cancel()
    await asyncio.wait((worker,))  # its own ending; a second cancellation of ours still raises
    if not worker.cancelled():
        worker.exception()  # retrieved: whatever the view raised on its way out is not ours to log
    if answer:
        answer[0].close()
        return
    try:
        await handler.send_response(stopped_response(scope["path"]), send)
    except (OSError, RuntimeError):  # the connection is gone
        pass
