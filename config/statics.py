"""`/static/`: the admin's CSS and JS (operators only; `/v1` never comes here).

Django's `ASGIStaticFilesHandler` serves them, and answers only `Http404`
itself: its finders refuse a name that leaves the static root by raising
`SuspiciousFileOperation`, which escaped to the server as a 500 and a 65-line
traceback per request — `GET /static/../x` let any client flood the log
(issue 34). `StaticFiles` is that handler with two guards, both ending in
the same 404 as a file that does not exist (the URLconf's JSON 404):

- a name no static file has is refused before any file system work and
  with no log line: a `.` or `..` segment, a leading `/` (absolute), a
  backslash, a control character (NUL, CR, LF…), more than MAX_NAME
  characters. The name checked is the one Django would look up
  (`file_path`: the server decodes `%2e%2e` and `%2f`, and Django decodes
  the rest once more, so `%252e%252e` is a `..` too);
- whatever the finders or the file system still refuse (a suspicious
  operation, an impossible name) is a 404 with one warning line: the
  exception's class and the path, never a traceback.
"""

from __future__ import annotations

import logging

from asgiref.sync import sync_to_async
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.core.handlers.exception import response_for_exception
from django.http import Http404, HttpRequest, HttpResponseBase

__all__ = ["MAX_NAME", "StaticFiles", "refused"]

log = logging.getLogger(__name__)

# Characters of a static file's name under the root (the admin's longest is
# ~60); a longer one is no file of ours, whatever it holds.
MAX_NAME = 1024


def refused(name: str) -> bool:
    """Whether `name` (relative to the static root) can be no static file."""
    if not name or len(name) > MAX_NAME or name[0] == "/" or "\\" in name or not name.isprintable():
        return True
    return any(part in (".", "..") for part in name.split("/"))


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, refusing what is no static file as a 404."""

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        if refused(self.file_path(request.path)):
            return await self._not_found(request)
        try:
            return await super().get_response_async(request)
        except (SuspiciousOperation, OSError, ValueError) as exc:
            log.warning("static file refused: %s %r", type(exc).__name__, request.path[:200])
            return await self._not_found(request)

    async def _not_found(self, request: HttpRequest) -> HttpResponseBase:
        response = await sync_to_async(response_for_exception, thread_sensitive=False)(request, Http404())
        response._resource_closers.append(request.close)  # as the handler does for its own answers
        return response
