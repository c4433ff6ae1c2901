"""The spool (router/spool.py): a body kept in memory while small and in an
anonymous file past MEMORY_MAX, read back in pieces, with one span replaced,
within the process's budget."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from router import spool
from router.spool import MEMORY_MAX, PIECE, Budget, Full, Spool, Upload


def run(coro):
    return asyncio.run(coro)


async def fill(s: Spool, data: bytes, rng: random.Random) -> None:
    at = 0
    while at < len(data):
        n = rng.randint(1, 200_000)
        await s.write(data[at : at + n])
        at += n
    await s.finish()


@pytest.mark.parametrize("size", [0, 10, MEMORY_MAX, MEMORY_MAX + 1, 5 * MEMORY_MAX + 12345])
def test_what_is_written_is_read_back_whole_and_in_pieces(size, tmp_path, monkeypatch):
    monkeypatch.setattr(spool, "DIRECTORY", str(tmp_path))
    rng = random.Random(size)
    data = rng.randbytes(size)
    budget = Budget()

    async def main():
        s = Spool(budget)
        await fill(s, data, rng)
        assert s.size == len(data) == budget.held
        pieces = [p async for p in s.pieces()]
        assert b"".join(pieces) == data
        assert all(len(p) <= PIECE for p in pieces)
        assert b"".join([p async for p in s.pieces(7, size - 3)]) == data[7 : size - 3]
        on_disk = s._file is not None
        s.close()
        s.close()  # idempotent
        return on_disk

    assert run(main()) == (size > MEMORY_MAX)
    assert budget.held == 0
    assert os.listdir(tmp_path) == []  # the file is anonymous: nothing is ever named there


def test_memory_holds_at_most_a_piece_once_the_body_is_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(spool, "DIRECTORY", str(tmp_path))

    async def main():
        s = Spool(Budget())
        most = 0
        for _ in range(200):  # 12.5 MiB in 64 KiB chunks
            await s.write(b"\x07" * 65536)
            if s._file is not None:
                most = max(most, len(s._memory))
        await s.finish()
        assert s.size == 200 * 65536
        s.close()
        return most

    assert run(main()) <= PIECE


@pytest.mark.parametrize("size", [100, 3 * MEMORY_MAX])
def test_an_upload_replaces_one_span(size):
    data = random.Random(1).randbytes(size)

    async def main():
        s = Spool(Budget())
        await fill(s, data, random.Random(2))
        start, end = size // 3, size // 3 + 5
        for value in (b"", b"x", b"internal/served-model-name"):
            upload = Upload(s, (start, end), value)
            expected = data[:start] + value + data[end:]
            assert upload.length == len(expected)
            assert await upload.read() == expected
            assert await upload.read() == expected  # read afresh for each attempt
        assert await Upload(s).read() == data
        s.close()

    run(main())


def test_the_budget_refuses_a_chunk_past_it_and_is_freed_on_close():
    budget = Budget()
    budget.limit = 1000

    async def main():
        a, b = Spool(budget), Spool(budget)
        await a.write(b"x" * 600)
        with pytest.raises(Full):
            await b.write(b"y" * 500)
        assert budget.refused == 1 and budget.held == 600
        a.close()
        await b.write(b"y" * 500)
        assert budget.held == 500
        b.close()
        assert budget.held == 0

    run(main())


# -- the door's reader (router/frontends/surface.py receive_form) ------------------

FORM = (
    b'--zz\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n'
    b'--zz\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    + bytes(range(256)) * 8192  # 2 MiB
    + b"\r\n--zz--\r\n"
)
SCOPE = {"type": "http", "method": "POST", "path": "/v1/audio/transcriptions",
         "headers": [(b"content-type", b"multipart/form-data; boundary=zz")]}


def arriving(body: bytes, *, then_gone: bool = False):
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]

    async def receive():
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks) or then_gone}
        return {"type": "http.disconnect"}

    return receive


def collector():
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    return sent, send


async def test_a_form_is_spooled_and_its_fields_read_as_it_arrives(tmp_path, monkeypatch):
    from router.frontends.surface import receive_form

    monkeypatch.setattr(spool, "DIRECTORY", str(tmp_path))
    sent, send = collector()
    held = spool.BUDGET.held
    received = await receive_form(SCOPE, arriving(FORM), send)
    assert sent == [] and received is not None and received.error is None
    assert received.form is not None and received.form.fields == {"model": "whisper"}
    assert received.spool.size == len(FORM) and spool.BUDGET.held == held + len(FORM)
    assert await Upload(received.spool, received.form.spans["model"], b"w-1").read() == FORM.replace(
        b"whisper", b"w-1", 1)
    received.close()
    assert spool.BUDGET.held == held


async def test_a_client_gone_mid_form_leaves_nothing_held(tmp_path, monkeypatch):
    from router.frontends.surface import receive_form

    monkeypatch.setattr(spool, "DIRECTORY", str(tmp_path))
    from router.frontends.direct import PENDING

    sent, send = collector()
    held, pending = spool.BUDGET.held, PENDING.held
    assert await receive_form(SCOPE, arriving(FORM[:900_000], then_gone=True), send) is None  # in memory yet
    assert sent == [] and spool.BUDGET.held == held and PENDING.held == pending
    assert await receive_form(SCOPE, arriving(FORM[:1_500_000], then_gone=True), send) is None  # on disk
    assert sent == [] and spool.BUDGET.held == held and PENDING.held == pending


async def test_a_spool_directory_that_fails_is_a_503_not_a_crash(tmp_path, monkeypatch):
    from router.frontends.surface import receive_form

    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the spool directory should be")
    monkeypatch.setattr(spool, "DIRECTORY", str(blocked / "spool"))
    sent, send = collector()
    held = spool.BUDGET.held
    assert await receive_form(SCOPE, arriving(FORM), send) is None
    assert sent[0]["status"] == 503 and (b"retry-after", b"1") in sent[0]["headers"]
    assert b'"request_body_not_kept"' in sent[1]["body"]
    assert spool.BUDGET.held == held


def test_what_a_form_holds_in_memory_while_it_arrives_counts_in_the_memory_budget(tmp_path, monkeypatch):
    """Many forms of under 1 MiB each stay in memory: they count in the bound on
    bodies still arriving, until they move to disk or are complete."""
    monkeypatch.setattr(spool, "DIRECTORY", str(tmp_path))
    memory = Budget()
    memory.limit = MEMORY_MAX + MEMORY_MAX // 2

    async def main():
        a, b = Spool(Budget(), memory), Spool(Budget(), memory)
        await a.write(b"a" * MEMORY_MAX)
        assert memory.held == MEMORY_MAX
        with pytest.raises(Full):
            await b.write(b"b" * (MEMORY_MAX // 2 + 1))
        for _ in range(4):  # a passes MEMORY_MAX: on disk, its memory given back
            await a.write(b"a" * PIECE)
        assert a._file is not None and memory.held < PIECE
        await b.write(b"b" * (MEMORY_MAX // 2))
        await b.finish()  # complete: no longer a body arriving
        await a.finish()
        assert memory.held == 0
        assert await Upload(a).read() == b"a" * (MEMORY_MAX + 4 * PIECE)
        a.close()
        b.close()
        assert memory.held == 0

    run(main())
