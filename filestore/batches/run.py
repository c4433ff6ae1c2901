"""Running one batch in the tasks process (on the batch loop, loop.py).

One runner per batch at a time, cluster-wide: a lease in Redis
(`<prefix>batch:<id>`, ROUTER_BATCH_LEASE_SECONDS, renewed at a third of
it). A runner that dies (its process killed) leaves the lease to lapse, and
the next sweep (tasks.sweep_batches, every 2 s) starts another, which
resumes where the results recorded end:

- `validating`: every line is checked (lines.validate) → `failed` with the
  errors naming the lines, or `in_progress` with the count.
- `in_progress`: the lines without a result are sent through the `/v1`
  door as the batch's key (router.frontends.openai `on_behalf`), at most
  ROUTER_BATCH_CONCURRENCY of a batch and ROUTER_BATCH_NODE_CONCURRENCY of
  this process at a time; each whole answer is recorded as a `BatchLine`
  (inserted once per line), flushed every FLUSH_S with the counts. A line in
  flight when a runner dies is sent again by the next; a line with a result
  never is, and every line has exactly one.
- a cancel (`cancelling`) or the window's end stops new lines; those in
  flight finish; then `cancelled` / `expired` with the partial files.
- all lines answered → `finalizing` → the output (2xx) and error files
  (purpose `batch_output`, line order) → `completed`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import tempfile
import time
from typing import Any

import orjson
from django.conf import settings
from django.core.files import File

from router.admission import Call, Caller, ready_snapshot
from router.aio import check_cancelled
from router.core.errors import CapacityExhausted, FileNotFound, NotReady, RateLimited, RouterError
from router.dbthread import DbThread
from router.frontends import openai
from router.redis import async_client
from router.runtime import get_runtime

from ..models import StoredFile
from ..selectors import file_get
from ..services import file_storage
from . import lines, store, wire

log = logging.getLogger(__name__)

FLUSH_S = 0.2  # results are recorded at least this often (and the counts with them)
WATCH_S = 1.0  # how often a runner reads its batch's status (a cancel) and the clock (its window)
RETRIED = (RateLimited, CapacityExhausted, NotReady)  # the router's own "not now": a line waits and tries again
RETRIES = 6

_db = DbThread("router-batches-db")
_running: set[str] = set()
_node: asyncio.Semaphore | None = None


def _node_slots() -> asyncio.Semaphore:
    global _node
    if _node is None:
        _node = asyncio.Semaphore(settings.ROUTER_BATCH_NODE_CONCURRENCY)
    return _node


async def start(batch_id: str) -> None:
    """Run the batch unless this process or another holds it already."""
    if batch_id in _running:
        return
    _running.add(batch_id)
    try:
        lease = Lease(batch_id)
        if not await lease.take():
            return
        keeper = asyncio.create_task(lease.keep())
        try:
            await _advance(batch_id, lease)
        finally:
            keeper.cancel()
            await lease.release()
    except Exception as exc:
        log.error("batch %s: runner failed: %s", batch_id, type(exc).__name__, exc_info=exc)
    finally:
        _running.discard(batch_id)


class Lease:
    """The one runner's claim on a batch: a Redis key holding a random token."""

    _RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
    _DROP = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

    def __init__(self, batch_id: str) -> None:
        self.key = f"{settings.ROUTER_REDIS_PREFIX}batch:{batch_id}"
        self.token = secrets.token_hex(8)
        self.ms = int(settings.ROUTER_BATCH_LEASE_SECONDS * 1000)
        self.lost = False

    async def take(self) -> bool:
        return bool(await async_client().set(self.key, self.token, nx=True, px=self.ms))

    async def keep(self) -> None:
        while True:
            await asyncio.sleep(self.ms / 3000)
            try:
                renewed = await async_client().eval(self._RENEW, 1, self.key, self.token, self.ms)
            except Exception as exc:  # Redis away: the lease may lapse; stop before another runner starts
                check_cancelled()
                log.warning("batch lease %s not renewed: %s", self.key, type(exc).__name__)
                renewed = 0
            check_cancelled()
            if not renewed:
                self.lost = True
                return

    async def release(self) -> None:
        try:
            await async_client().eval(self._DROP, 1, self.key, self.token)
        except Exception:
            pass  # it lapses


async def _advance(batch_id: str, lease: Lease) -> None:
    row = await _db.run(store.load, batch_id)
    if row is None:
        return
    if row.status == wire.VALIDATING:
        await _validate(row)
        row = await _db.run(store.load, batch_id)
    if row is None or lease.lost:
        return
    reason = None
    if row.status in (wire.IN_PROGRESS, wire.CANCELLING):
        try:
            reason = await _execute(row, lease)
        except (FileNotFound, FileNotFoundError):  # the input file was deleted: its other lines cannot run
            error = {"code": "input_file_deleted", "message": f"The input file {row.input_file_id} was deleted.",
                     "param": "input_file_id", "line": None}
            await _finalize(row, (wire.IN_PROGRESS, wire.CANCELLING), wire.FAILED, failed_at=int(time.time()),
                            errors=[error])
            return
        if reason == "lease":
            return
        row = await _db.run(store.load, batch_id)
    if row is None:
        return
    now = int(time.time())
    if row.status == wire.CANCELLING:
        await _finalize(row, (wire.CANCELLING,), wire.CANCELLED, cancelled_at=now)
    elif reason == "expire" or (row.status == wire.IN_PROGRESS and now >= row.expires_at):
        await _finalize(row, (wire.IN_PROGRESS,), wire.EXPIRED, expired_at=now)
    elif row.status == wire.IN_PROGRESS:
        done, _, _ = await _db.run(store.done_lines, row.id)
        if len(done) < row.total:  # a result was lost (a DB write failed): the next sweep sends what is missing
            log.warning("batch %s: %d of %d lines have a result; resuming later", row.id, len(done), row.total)
            return
        if await _db.run(store.move, row.id, (wire.IN_PROGRESS,), wire.FINALIZING, finalizing_at=now):
            await _finalize(row, (wire.FINALIZING,), wire.COMPLETED, completed_at=int(time.time()))
        else:  # cancelled at the last moment: every line ran anyway
            await _finalize(row, (wire.CANCELLING,), wire.CANCELLED, cancelled_at=int(time.time()))
    elif row.status == wire.FINALIZING:  # a runner died while finalizing
        await _finalize(row, (wire.FINALIZING,), wire.COMPLETED, completed_at=now)


async def _validate(row) -> None:
    now = int(time.time())
    snap = await ready_snapshot()
    gate = get_runtime().gate
    try:
        source = await _db.run(file_get, row.owner, row.input_file_id)
        key = await gate.admit_id(row.owner, time.time(), count=False) if gate is not None else None
    except RouterError as exc:
        await _db.run(store.move, row.id, (wire.VALIDATING,), wire.FAILED, failed_at=now,
                      errors=[{"code": exc.code, "message": exc.message, "param": exc.param, "line": None}])
        return
    caller = Caller(snap=snap, headers={}, client_ip="", host="", request_id="", gate=gate, key=key)
    verdict = await asyncio.to_thread(
        lines.validate, source.storage_name, row.endpoint, snap.max_body_bytes,
        settings.ROUTER_BATCH_MAX_LINES, caller.check_model,
    )
    now = int(time.time())
    if verdict.errors:
        errors = [e.as_wire() for e in verdict.errors]
        if verdict.more_errors:
            errors.append({"code": "more_errors", "message": f"{verdict.more_errors} more lines are invalid.",
                           "param": None, "line": None})
        await _db.run(store.move, row.id, (wire.VALIDATING,), wire.FAILED, failed_at=now, errors=errors,
                      total=verdict.total)
        return
    await _db.run(store.move, row.id, (wire.VALIDATING,), wire.IN_PROGRESS, in_progress_at=now,
                  total=verdict.total, model=verdict.model)


class _Run:
    """One runner's pass over a batch's lines."""

    def __init__(self, row, lease: Lease) -> None:
        self.row = row
        self.lease = lease
        self.stop: str | None = "cancel" if row.status == wire.CANCELLING else None
        self.results: list[tuple[int, bool, str]] = []
        self.stopped = asyncio.Event()

    async def watch(self) -> None:
        while self.stop is None:
            await asyncio.sleep(WATCH_S)
            if self.lease.lost:
                self.stop = "lease"
            elif time.time() >= self.row.expires_at:
                self.stop = "expire"
            elif await _db.run(store.status_of, self.row.id) == wire.CANCELLING:
                self.stop = "cancel"
        self.stopped.set()

    async def flush_forever(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            await self.flush()

    async def flush(self) -> None:
        if self.results:
            results, self.results = self.results, []
            try:
                await _db.run(store.record_lines, self.row.id, results)
            except Exception as exc:  # the DB away: kept for the next flush (or sent again by the next runner)
                log.warning("batch %s: results not recorded yet: %s", self.row.id, type(exc).__name__)
                self.results[:0] = results

    async def line(self, number: int, raw: bytes | None, batch: asyncio.Semaphore, node: asyncio.Semaphore) -> None:
        try:
            try:
                ok, output = await self._answer(number, raw)
            except Exception as exc:  # a bug of ours: the line's answer is OpenAI's 500, as a /v1 client's
                log.error("batch %s line %d failed: %s", self.row.id, number, type(exc).__name__, exc_info=exc)
                ok, output = False, self._failed(number, raw)
            self.results.append((number, ok, output))
        finally:
            batch.release()
            node.release()

    def _failed(self, number: int, raw: bytes | None) -> str:
        try:
            custom_id: str | None = lines.parse_line(raw, number, self.row.endpoint)[0]
        except lines.LineFailed:
            custom_id = None
        error = RouterError()
        out = wire.result_line("batch_req_" + secrets.token_hex(12), custom_id or "", error.status,
                               "req_" + secrets.token_hex(16), error.to_dict())
        return orjson.dumps(out).decode()

    async def _answer(self, number: int, raw: bytes | None) -> tuple[bool, str]:
        line_id = "batch_req_" + secrets.token_hex(12)
        request_id = "req_" + secrets.token_hex(16)
        try:
            custom_id, body = lines.parse_line(raw, number, self.row.endpoint)
        except lines.LineFailed as failed:  # validated before: only an input file changed under us
            error = {"code": failed.error.code, "message": failed.error.message}
            return False, orjson.dumps({"id": line_id, "custom_id": None, "response": None, "error": error}).decode()
        scope = {
            "type": "http", "method": "POST", "path": self.row.endpoint, "client": None,
            "headers": [(b"content-type", b"application/json"), (b"x-request-id", request_id.encode())],
        }
        endpoint = self.row.endpoint.removeprefix("/v1/")
        sent = orjson.dumps(body)
        for attempt in range(RETRIES + 1):
            result = await openai.routed_or_refusal(Call(scope), endpoint, sent, on_behalf=self.row.owner)
            if isinstance(result, RETRIED) and attempt < RETRIES and self.stop is None:
                wait = min(2.0**attempt, 30.0)
                try:
                    wait = max(wait, float(result.headers.get("Retry-After", 0)))
                except ValueError:
                    pass
                await asyncio.sleep(min(wait, 60.0))
                continue
            break
        if isinstance(result, RouterError):
            status, answer = result.status, result.to_body()
        else:
            async with result as routed:
                status, answer = routed.status, routed.body()
        try:
            parsed: Any = orjson.loads(answer)
        except orjson.JSONDecodeError:
            parsed = answer.decode("utf-8", "replace")
        out = wire.result_line(line_id, custom_id, status, request_id, parsed)
        return 200 <= status < 300, orjson.dumps(out).decode()


async def _execute(row, lease: Lease) -> str | None:
    """Send every line without a result; why it stopped early, or None."""
    done, _, _ = await _db.run(store.done_lines, row.id)
    source = await _db.run(file_get, row.owner, row.input_file_id)
    snap = await ready_snapshot()
    run = _Run(row, lease)
    watcher = asyncio.create_task(run.watch())
    flusher = asyncio.create_task(run.flush_forever())
    batch, node = asyncio.Semaphore(settings.ROUTER_BATCH_CONCURRENCY), _node_slots()
    pending: set[asyncio.Task] = set()
    blocks = lines.read_blocks(source.storage_name, snap.max_body_bytes)
    try:
        while run.stop is None:
            block = await asyncio.to_thread(next, blocks, None)
            if block is None:
                break
            for number, raw in block:
                if number in done:
                    continue
                await batch.acquire()
                await node.acquire()
                if run.stop is not None:
                    batch.release()
                    node.release()
                    break
                task = asyncio.create_task(run.line(number, raw, batch, node))
                pending.add(task)
                task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    finally:
        blocks.close()
        flusher.cancel()
        watcher.cancel()
        await run.flush()
    if run.stop is None and lease.lost:
        return "lease"
    return run.stop


async def _finalize(row, leaving: tuple[str, ...], status: str, **fields: Any) -> None:
    """Write the output and error files, then end the batch (store.finish)."""
    owner = row.owner
    files: list[StoredFile] = []
    storage = file_storage()
    for ok, kind in ((True, "output"), (False, "error")):
        made = await asyncio.to_thread(_write_file, row.id, ok, kind, owner, row.owner_name, storage)
        if made is not None:
            files.append(made)
            fields["output_file_id" if ok else "error_file_id"] = made.id
    _, ok_count, failed = await _db.run(store.done_lines, row.id)
    fields.update(completed=ok_count, failed=failed)
    if not await _db.run(store.finish, row.id, leaving, status, files, **fields):
        for made in files:  # another ending won: its files stand, these go
            await asyncio.to_thread(storage.delete, made.storage_name)


def _write_file(batch_id: str, ok: bool, kind: str, owner: str, owner_name: str, storage) -> StoredFile | None:
    """The recorded outputs of one kind, in line order, as a stored file
    (its row not yet saved); None when there are none. Sync."""
    with tempfile.TemporaryFile() as out:
        after = 0
        while True:
            page = store.line_outputs(batch_id, ok, after)
            if not page:
                break
            out.write(b"".join(output.encode() + b"\n" for _, output in page))
            after = page[-1][0]
        size = out.tell()
        if size == 0:
            return None
        out.seek(0)
        file_id = "file-" + secrets.token_hex(12)
        name = storage.save(file_id, File(out, name=f"{batch_id}_{kind}.jsonl"))
    return StoredFile(id=file_id, owner=owner, owner_name=owner_name, filename=f"{batch_id}_{kind}.jsonl",
                      purpose="batch_output", bytes=size, created_at=int(time.time()), storage_name=name)
