"""Django for the /v1 hot path: no middleware, no per-request thread hops.

Stock `ASGIHandler` runs every `MiddlewareMixin` middleware (sessions, CSRF,
auth, messages…) through `sync_to_async`, opens a per-request
`ThreadSensitiveContext` executor, and closes each response in a thread:
measured at ~1.5 ms of CPU per request on this stack (docs/performance.md).
The /v1 views are async end to end, never touch the DB and need none of that
middleware, so the ASGI entry point sends them here: the same URLconf, the
same views, Django's request/response objects and disconnect handling.
"""

from __future__ import annotations

import asyncio

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix


class LeanASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        saved = settings.MIDDLEWARE
        settings.MIDDLEWARE = []
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = saved

    async def __call__(self, scope, receive, send) -> None:
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            return

        async def process_request() -> object:
            response = await self.run_get_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass
            return response

        # As Django does: a client disconnect cancels the view / the stream.
        listener = asyncio.create_task(self.listen_for_disconnect(receive))
        worker = asyncio.create_task(process_request())
        await asyncio.wait((listener, worker), return_when=asyncio.FIRST_COMPLETED)
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
