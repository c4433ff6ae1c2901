"""Batches end to end: the official openai SDK → a real router (uvicorn) and
its real tasks process (Celery worker + beat on the shared Redis) → a fake
OpenAI backend on loopback. The tasks process runs the lines through the
router's own door; these tests watch only what a client sees (the Batch
object, the output and error files) and what the backend received.
"""

from __future__ import annotations

import io
import json
import sqlite3
import threading
import time
import uuid
from collections import Counter

import openai
import orjson
import pytest

from fakes import openai_backend
from tests.keys.e2e import create_key, sdk
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m, n]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
"""
DONE = ("completed", "failed", "cancelled", "expired")


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m", "n"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def router(backend):
    proc = RouterProc(
        CONFIG.format(url=backend.url),
        tasks=True,
        env={"ROUTER_BATCH_LEASE_SECONDS": "4", "ROUTER_BATCH_CONCURRENCY": "2",
             "ROUTER_BATCH_NODE_CONCURRENCY": "3", "ROUTER_BATCH_MAX_ACTIVE_PER_KEY": "2"},
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def _fresh_backend(backend):
    backend.behavior.reset()
    yield
    backend.behavior.reset()


def chat_line(custom_id: str, model: str = "m", **extra) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"say {custom_id}"}]}, **extra}


def submit(client: openai.OpenAI, items: list, endpoint: str = "/v1/chat/completions"):
    data = b"".join((x if isinstance(x, bytes) else orjson.dumps(x)) + b"\n" for x in items)
    made = client.files.create(file=("in.jsonl", io.BytesIO(data), "application/jsonl"), purpose="batch")
    return client.batches.create(input_file_id=made.id, endpoint=endpoint, completion_window="24h",
                                 metadata={"run": "test"})


def wait_status(client: openai.OpenAI, batch_id: str, statuses=DONE, timeout: float = 120):
    return wait_until(lambda: (b := client.batches.retrieve(batch_id)).status in statuses and b, timeout,
                      interval=0.2, what=f"batch {batch_id} to be {statuses}")


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [orjson.loads(line) for line in client.files.content(file_id).read().splitlines()]


def key_usage(proc: RouterProc, name: str) -> list[int]:
    """[requests, errors, prompt, completion] of the key named `name`, after
    folding the Redis usage buffer into the DB (keys.fold_usage, as beat does)."""
    code = (
        "import json; from keys.tasks import fold_usage; from keys.models import ApiKey, KeyUsage; "
        "from keys.selectors import record_id; fold_usage(); "
        f"ref = record_id(ApiKey.objects.get(name={name!r})); "
        "rows = KeyUsage.objects.filter(key_ref=ref).values_list('requests', 'errors', 'prompt_tokens', "
        "'completion_tokens'); print(json.dumps([sum(r[i] for r in rows) for i in range(4)]))"
    )
    out = proc.manage("shell", "-c", code)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_batch_runs_every_line_through_the_router_and_writes_openai_lines(router, backend):
    """validating → in_progress → finalizing → completed; the output file holds
    one line per request in input order, each the backend's answer; the key's
    usage counts every line, as for its /v1 requests."""
    name = f"batch-{uuid.uuid4().hex[:8]}"
    client = sdk(router, create_key(router, name=name))
    seen = len(backend.requests)
    batch = submit(client, [chat_line(f"c{i}") for i in range(6)])
    assert (batch.object, batch.status, batch.endpoint, batch.metadata) == (
        "batch", "validating", "/v1/chat/completions", {"run": "test"})
    done = wait_status(client, batch.id)
    assert done.status == "completed", done
    assert done.request_counts.model_dump() == {"total": 6, "completed": 6, "failed": 0}
    assert done.in_progress_at and done.finalizing_at and done.completed_at and done.model == "m"
    assert done.error_file_id is None
    out = lines_of(client, done.output_file_id)
    assert [line["custom_id"] for line in out] == [f"c{i}" for i in range(6)]
    for line in out:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200 and line["response"]["request_id"].startswith("req_")
        assert line["response"]["body"]["object"] == "chat.completion"
    sent = backend.requests[seen:]
    assert sorted(r.json["messages"][0]["content"] for r in sent) == sorted(f"say c{i}" for i in range(6))
    output = client.files.retrieve(done.output_file_id)
    assert (output.purpose, output.filename) == ("batch_output", f"{batch.id}_output.jsonl")
    assert [b.id for b in client.batches.list()] == [batch.id]
    usage = [sum(line["response"]["body"]["usage"][f] for line in out) for f in ("prompt_tokens", "completion_tokens")]
    expected = [6, 0, *usage]
    wait_until(lambda: key_usage(router, name) == expected, 60, interval=1, what="the lines in the key's usage")


def test_embeddings_batch_with_an_upstream_error_goes_to_the_error_file(router, backend):
    """A line the backend refuses is answered in the error file with its
    status, and counted failed; the others are in the output file."""
    client = sdk(router, create_key(router))
    items = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
              "body": {"model": "m", "input": f"text {i}"}} for i in range(3)]
    batch = submit(client, items, endpoint="/v1/embeddings")
    done = wait_status(client, batch.id)
    assert done.status == "completed" and done.request_counts.completed == 3
    assert all(line["response"]["body"]["object"] == "list" for line in lines_of(client, done.output_file_id))
    backend.behavior.status = 400
    batch = submit(client, items, endpoint="/v1/embeddings")
    done = wait_status(client, batch.id)
    assert done.status == "completed" and done.request_counts.model_dump() == {"total": 3, "completed": 0, "failed": 3}
    assert done.output_file_id is None
    errors = lines_of(client, done.error_file_id)
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [(f"e{i}", 400) for i in range(3)]
    assert "error" in errors[0]["response"]["body"]


def test_an_invalid_input_file_fails_the_batch_naming_each_bad_line(router, backend):
    """Nothing is sent upstream; `errors` names every bad line and why."""
    key = create_key(router, "--models", "m")
    client = sdk(router, key)
    seen = len(backend.requests)
    batch = submit(client, [
        chat_line("ok"),
        b"{not json",
        chat_line("ok"),
        chat_line("get", method="GET"),
        {**chat_line("url"), "url": "/v1/embeddings"},
        chat_line("other-model", model="n"),
        chat_line("unknown-model", model="nope"),
    ])
    done = wait_status(client, batch.id)
    assert done.status == "failed" and done.failed_at
    got = [(e.line, e.code) for e in done.errors.data]
    assert got == [(2, "invalid_json_line"), (3, "duplicate_custom_id"), (4, "invalid_method"),
                   (5, "mismatched_endpoint"), (6, "model_not_allowed"), (7, "model_not_found")]
    assert len(backend.requests) == seen
    assert done.output_file_id is None and done.error_file_id is None


def test_create_refuses_bad_fields_with_openai_errors(router):
    client = sdk(router, create_key(router))
    made = client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="batch")
    for fields, param in (
        ({"endpoint": "/v1/images", "completion_window": "24h"}, "endpoint"),
        ({"endpoint": "/v1/embeddings", "completion_window": "1h"}, "completion_window"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            client.batches.create(input_file_id=made.id, **fields)
        assert err.value.body["param"] == param
    user = client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="user_data")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=user.id, endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(openai.NotFoundError) as err:
        client.batches.retrieve("batch_nope")
    assert err.value.body["code"] == "batch_not_found"


def test_a_batch_belongs_to_its_key(router):
    """Another key can neither see, list nor cancel it, nor run a batch on
    the owner's file."""
    owner, other = sdk(router, create_key(router)), sdk(router, create_key(router))
    batch = submit(owner, [chat_line("x")])
    for call in (other.batches.retrieve, other.batches.cancel):
        with pytest.raises(openai.NotFoundError):
            call(batch.id)
    assert [b.id for b in other.batches.list()] == []
    with pytest.raises(openai.NotFoundError):
        other.batches.create(input_file_id=batch.input_file_id, endpoint="/v1/chat/completions",
                             completion_window="24h")
    assert wait_status(owner, batch.id).status == "completed"


def test_cancel_stops_new_lines_and_keeps_the_partial_output(router, backend):
    """cancelling → cancelled; the lines answered before are in the output,
    each once, and the rest were never sent."""
    backend.behavior.delay_s = 0.4
    client = sdk(router, create_key(router))
    seen = len(backend.requests)
    batch = submit(client, [chat_line(f"k{i}") for i in range(40)])
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 2, 120,
               what="two lines answered")
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    done = wait_status(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    out = lines_of(client, done.output_file_id)
    ids = [line["custom_id"] for line in out]
    assert len(ids) == len(set(ids)) == done.request_counts.completed
    assert 2 <= len(ids) < 40
    assert len(backend.requests) - seen < 40
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(wait_status(client, submit(client, [chat_line("z")]).id).id)


def test_a_worker_killed_mid_batch_resumes_without_repeating_a_line(router, backend):
    """SIGKILL the tasks process mid-batch, start another: the batch completes
    and every custom_id is in the output exactly once."""
    backend.behavior.delay_s = 0.3
    client = sdk(router, create_key(router))
    batch = submit(client, [chat_line(f"r{i}") for i in range(30)])
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 4, 120,
               what="some lines answered")
    router.kill_tasks()
    before = client.batches.retrieve(batch.id).request_counts.completed
    assert before < 30
    router.start_tasks()
    done = wait_status(client, batch.id, timeout=180)
    assert done.status == "completed"
    ids = Counter(line["custom_id"] for line in lines_of(client, done.output_file_id))
    assert ids == Counter({f"r{i}": 1 for i in range(30)})
    assert done.request_counts.model_dump() == {"total": 30, "completed": 30, "failed": 0}


def test_a_batch_past_its_window_expires_with_its_partial_output(router, backend):
    """The window ends while no tasks process runs the batch (the clock moved
    past `expires_at`): the next runner sends no more lines, and the batch is
    expired with the lines answered before in its output."""
    backend.behavior.delay_s = 0.3
    client = sdk(router, create_key(router))
    batch = submit(client, [chat_line(f"x{i}") for i in range(30)])
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 3, 120,
               what="some lines answered")
    router.kill_tasks()
    with sqlite3.connect(router.db) as db:  # the window ends now
        db.execute("UPDATE filestore_batch SET expires_at = ? WHERE id = ?", (int(time.time()), batch.id))
    router.start_tasks()
    done = wait_status(client, batch.id, timeout=180)
    assert done.status == "expired" and done.expired_at
    ids = [line["custom_id"] for line in lines_of(client, done.output_file_id)]
    assert len(ids) == len(set(ids)) == done.request_counts.completed
    assert 3 <= len(ids) < 30


def test_a_batch_whose_input_file_was_deleted_fails_with_its_partial_output(router, backend):
    """The input file deleted while no runner holds it open (the tasks
    process down): the next runner cannot read the lines left, and fails the
    batch with `input_file_deleted`, the lines answered before in its output."""
    backend.behavior.delay_s = 0.3
    client = sdk(router, create_key(router))
    batch = submit(client, [chat_line(f"d{i}") for i in range(40)])
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 2, 120,
               what="some lines answered")
    router.kill_tasks()
    client.files.delete(batch.input_file_id)
    router.start_tasks()
    done = wait_status(client, batch.id, timeout=180)
    assert done.status == "failed" and done.failed_at
    assert [e.code for e in done.errors.data] == ["input_file_deleted"]
    ids = [line["custom_id"] for line in lines_of(client, done.output_file_id)]
    assert len(ids) == len(set(ids)) == done.request_counts.completed
    assert 2 <= len(ids) < 40


def test_lines_in_flight_stay_within_the_batch_and_node_bounds(router, backend):
    """Two batches at once: never more than ROUTER_BATCH_CONCURRENCY (2) lines
    of one batch, nor ROUTER_BATCH_NODE_CONCURRENCY (3) of both, at the
    backend at any moment it was looked at; and both bounds were reached."""
    backend.behavior.delay_s = 0.3
    client = sdk(router, create_key(router))
    seen = len(backend.requests)
    peaks = {"a": 0, "b": 0, "all": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            running = [r.json["messages"][0]["content"] for r in backend.requests[seen:] if r.outcome is None]
            for name in ("a", "b"):
                peaks[name] = max(peaks[name], sum(c.startswith(f"say {name}") for c in running))
            peaks["all"] = max(peaks["all"], len(running))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        first = submit(client, [chat_line(f"a{i}") for i in range(30)])
        second = submit(client, [chat_line(f"b{i}") for i in range(12)])
        assert wait_status(client, first.id).status == "completed"
        assert wait_status(client, second.id).status == "completed"
    finally:
        stop.set()
        watcher.join(5)
    assert peaks["a"] <= 2 and peaks["b"] <= 2 and peaks["all"] <= 3, peaks
    assert peaks["all"] == 3, peaks


def test_a_key_past_its_unfinished_batches_is_429_until_one_ends(router, backend):
    """ROUTER_BATCH_MAX_ACTIVE_PER_KEY (2 here): a third unfinished batch is
    refused, nothing recorded; another key is not held back; once one ends
    the key may create again. The backend answers no line until the gate
    opens, so the first two stay unfinished however loaded the machine."""
    gate = threading.Event()
    backend.behavior.gate = gate
    try:
        client = sdk(router, create_key(router))
        first = submit(client, [chat_line(f"a{i}") for i in range(3)])
        second = submit(client, [chat_line(f"b{i}") for i in range(3)])
        with pytest.raises(openai.RateLimitError) as err:
            submit(client, [chat_line("c")])
        body = err.value.body
        assert body["code"] == "too_many_batches" and "2 unfinished batches" in body["message"]
        assert {b.id for b in client.batches.list()} == {first.id, second.id}
        other = sdk(router, create_key(router))
        theirs = submit(other, [chat_line("o")])
        client.batches.cancel(first.id)
    finally:
        gate.set()
    assert wait_status(client, first.id).status == "cancelled"
    third = submit(client, [chat_line("c")])
    for batch_id, owner in ((third.id, client), (second.id, client), (theirs.id, other)):
        assert wait_status(owner, batch_id).status == "completed"
