"""The OpenAI door's answer keeper for `POST /v1/responses` (router.extensions).

Per request, before routing:
- `previous_response_id`: the stored response is looked up for the caller's
  owner (owner.py) — still queued in this process (writer.pending), else in
  the database on the app's DB thread, looked at again after `RECHECK_S`
  when missing, since another web process may be writing it this very
  moment — and the request becomes the whole conversation
  (items.continued), so any backend serves it: a native Responses upstream
  and the chat bridge alike. Unknown, pruned, deleted or another owner's:
  404 `previous_response_not_found` naming the id.
- `store` (true when absent, as OpenAI's default): the routed answer's
  provider is wrapped so a 200 Response object is handed to the writer once
  the client has it — the whole answer as its body is taken, a stream's
  `response.completed` / `response.incomplete` object after its last event
  (assembled as it passes, router.respcache.assemble, up to
  ROUTER_RESPONSES_MAX_BYTES). An error answer, an error event or a cut
  stream is not stored. `store: false` stores nothing and costs nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.conf import settings

from router.core.errors import InvalidRequest, PreviousResponseNotFound
from router.extensions import Kept
from router.providers.base import WIRE_OPENAI, Exchange, Renders
from router.request import Envelope
from router.respcache.assemble import assembler, tee

from . import db, items, selectors
from .owner import owner_of
from .record import of_answer
from .writer import WRITER

RECHECK_S = (0.05, 0.25)  # waits before looking a missing previous response up again
MAX_ID = 100


async def keeper(caller: Any, body: dict[str, Any]) -> Kept | None:
    previous = body.get("previous_response_id")
    store = body.get("store") is not False
    if previous is None and not store:
        return None
    if previous is not None and (not isinstance(previous, str) or not previous or len(previous) > MAX_ID):
        raise InvalidRequest("'previous_response_id' must be a response id.", param="previous_response_id")
    owner, owner_name = owner_of(caller)
    earlier: list[dict[str, Any]] = []
    widened = None
    if previous is not None:
        found = await conversation(owner, previous)
        if found is None:
            raise PreviousResponseNotFound(
                f"Previous response with id '{previous}' not found.", param="previous_response_id"
            )
        earlier = found
        widened = items.continued(body, earlier)
    if not store:
        return Kept(widened, None)

    def keep(routed: Any) -> None:
        ex = routed.exchange
        if routed.provider is None or ex.status != 200 or ex.wire != WIRE_OPENAI:
            return
        routed.provider = _Storing(routed.provider, owner, owner_name, body, earlier)

    return Kept(widened, keep)


async def conversation(owner: str, response_id: str) -> list[dict[str, Any]] | None:
    """The items a continuation of `response_id` starts from (None: not the owner's)."""
    for wait in (0.0, *RECHECK_S):
        if wait:
            await asyncio.sleep(wait)
        record = WRITER.find(owner, response_id)
        if record is not None:
            given, output = record.conversation()
            return [*given, *output]
        found = await db.run(selectors.conversation, owner, response_id)
        if found is not None:
            return found
    return None


class _Storing:
    """A stored request's provider, its answer handed to the writer on the way out."""

    __slots__ = ("body", "earlier", "inner", "owner", "owner_name")

    def __init__(self, inner: Renders, owner: str, owner_name: str, body: dict[str, Any],
                 earlier: list[dict[str, Any]]) -> None:
        self.inner = inner
        self.owner = owner
        self.owner_name = owner_name
        self.body = body
        self.earlier = earlier

    def _save(self, answer: bytes | None) -> None:
        if answer is None or answer[:1] != b"{":
            return
        record = of_answer(answer, self.owner, self.owner_name, self.body, self.earlier)
        if record is not None:
            WRITER.put(record)

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        body, info = self.inner.finish(ex, env)
        self._save(body)
        return body, info

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        asm = assembler("responses", env.stream, settings.ROUTER_RESPONSES_MAX_BYTES)

        def finished(ok: bool | None, info: dict) -> None:
            # The relay's last act, after the client got its last chunk.
            if ok and asm is not None:
                self._save(asm.result())
            done(ok, info)

        source = self.inner.relay(ex, env, finished)
        return source if asm is None else tee(source, asm)
