"""The web process's RSS while one large file goes up /v1/files and back down,
then up once more as an audio transcription form passed through to a backend.

    .venv/bin/python bench/files_rss.py              # 1 GiB
    .venv/bin/python bench/files_rss.py --size-mb 200

One router (uvicorn web process, a temp SQLite DB, the shared Redis; files on
the local filesystem under its var dir), ROUTER_FILES_MAX_BYTES raised to fit.
The client streams a multipart body from a generator (httpx; never the whole
file in this process either), then downloads `/v1/files/{id}/content`
streaming, checking the size and sha256 both ways. A thread samples the web
process's VmRSS (/proc/<pid>/status) every 20 ms; printed: start, peak and
end of each phase, and VmHWM (the kernel's own peak, so no spike between
samples is missed). Flat means the peak does not grow with --size-mb.
The transcription goes to a backend that hashes the form as it reads it and
answers its size and sha256 (so the whole file crosses the router: spooled
to disk as it arrives, sent upstream from there, router/spool.py).
Needs about twice the file size free on disk while uploading (the spooled
body and Django's parsed upload file under the temp dir, then the stored file).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import httpx  # noqa: E402
from aiohttp import web  # noqa: E402

from fakes import openai_backend  # noqa: E402
from fakes.server import ServerThread  # noqa: E402
from tests.keys.e2e import create_key  # noqa: E402
from tests.support.routerproc import RouterProc  # noqa: E402

MB = 1024 * 1024
CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m]}}
  - {{name: t, url: '{counter}', models: [whisper]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
server: {{max_body_bytes: {body_max}}}
"""


def counting_app(_behavior, _requests) -> web.Application:
    """A transcription server that keeps nothing: it hashes the form as it reads it."""

    async def transcribe(request: web.Request) -> web.Response:
        digest, got = hashlib.sha256(), 0
        async for chunk in request.content.iter_chunked(MB):
            digest.update(chunk)
            got += len(chunk)
        return web.json_response({"text": f"{got} {digest.hexdigest()}"})

    app = web.Application()
    app.router.add_post("/v1/audio/transcriptions", transcribe)
    return app


def vm_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def vmrss_mb(pid: int) -> float:
    return vm_mb(pid)


class Sampler(threading.Thread):
    """VmRSS of `pid` every `every` s while running; the peak since `mark()`."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak = 0.0
        self.stopped = threading.Event()

    def mark(self) -> float:
        now = vmrss_mb(self.pid)
        self.peak = now
        return now

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.peak = max(self.peak, vmrss_mb(self.pid))


def file_blocks(size: int, block: int = MB):
    """`size` pseudo-random bytes in `block`-byte pieces (a 1 MiB random block, each copy salted)."""
    seed = os.urandom(block)
    sent, n = 0, 0
    while sent < size:
        piece = (n.to_bytes(8, "big") + seed[8:])[: size - sent]
        sent += len(piece)
        n += 1
        yield piece


def post_form(client: httpx.Client, path: str, field: str, value: str, size: int) -> tuple[httpx.Response, str, int]:
    """POST a multipart form (`field`=`value`, then a `size`-byte file) streamed
    from a generator; (the answer, the file's sha256, the form's length)."""
    boundary = uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"\r\n\r\n{value}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    digest = hashlib.sha256()

    def body():
        yield head
        for piece in file_blocks(size):
            digest.update(piece)
            yield piece
        yield tail

    response = client.post(
        path,
        content=body(),
        headers={
            "content-type": f"multipart/form-data; boundary={boundary}",
            "content-length": str(len(head) + size + len(tail)),
        },
    )
    response.raise_for_status()
    return response, digest.hexdigest(), len(head) + size + len(tail)


def upload(client: httpx.Client, size: int) -> tuple[str, str]:
    """POST /v1/files; (file id, sha256)."""
    response, sha, _ = post_form(client, "/v1/files", "purpose", "user_data", size)
    answer = response.json()
    assert answer["bytes"] == size, answer
    return answer["id"], sha


def transcribe(client: httpx.Client, size: int) -> tuple[int, int]:
    """POST /v1/audio/transcriptions; (the bytes the backend read, the form's length)."""
    response, _sha, length = post_form(client, "/v1/audio/transcriptions", "model", "whisper", size)
    return int(response.json()["text"].split()[0]), length


def download(client: httpx.Client, file_id: str) -> tuple[int, str]:
    digest, got = hashlib.sha256(), 0
    with client.stream("GET", f"/v1/files/{file_id}/content") as response:
        response.raise_for_status()
        for chunk in response.iter_bytes(MB):
            got += len(chunk)
            digest.update(chunk)
    return got, digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    args = parser.parse_args()
    size = args.size_mb * MB
    backend = openai_backend.server_thread("a", ["m"]).start()
    counter = ServerThread(counting_app).start()
    env = {
        "ROUTER_FILES_MAX_BYTES": str(size + MB),
        "ROUTER_FILES_MAX_BYTES_PER_KEY": str(4 * size),
        "ROUTER_LOG_LEVEL": "WARNING",
    }
    router = RouterProc(CONFIG.format(url=backend.url, counter=counter.url, body_max=size + MB), env=env)
    try:
        router.start()
        key = create_key(router, name=f"bench-{uuid.uuid4().hex[:6]}")
        with httpx.Client(base_url=router.url, timeout=600, headers={"authorization": f"Bearer {key}"}) as client:
            client.get("/v1/files").raise_for_status()  # warm the door (DB thread, storage)
            sampler = Sampler(router.proc.pid)
            sampler.start()
            start = sampler.mark()
            t0 = time.perf_counter()
            file_id, sent_sha = upload(client, size)
            up_s, up_peak, up_end = time.perf_counter() - t0, sampler.peak, vmrss_mb(router.proc.pid)
            down_start = sampler.mark()
            t0 = time.perf_counter()
            got, got_sha = download(client, file_id)
            down_s, down_peak, down_end = time.perf_counter() - t0, sampler.peak, vmrss_mb(router.proc.pid)
            form_start = sampler.mark()
            t0 = time.perf_counter()
            form_got, form_len = transcribe(client, size)
            form_s, form_peak, form_end = time.perf_counter() - t0, sampler.peak, vmrss_mb(router.proc.pid)
            sampler.stopped.set()
            hwm = vm_mb(router.proc.pid, "VmHWM")  # the kernel's peak since the process started: no spike missed
            client.delete(f"/v1/files/{file_id}").raise_for_status()
        assert got == size, (got, size)
        assert got_sha == sent_sha, "the downloaded bytes differ from the uploaded ones"
        print(f"file: {args.size_mb} MiB, sha256 {sent_sha[:16]}… verified after the round trip")
        print(
            f"upload:   {up_s:6.1f} s ({args.size_mb / up_s:6.0f} MiB/s)  "
            f"web RSS start {start:6.1f} MB  peak {up_peak:6.1f} MB  end {up_end:6.1f} MB"
        )
        print(
            f"download: {down_s:6.1f} s ({args.size_mb / down_s:6.0f} MiB/s)  "
            f"web RSS start {down_start:6.1f} MB  peak {down_peak:6.1f} MB  end {down_end:6.1f} MB"
        )
        assert form_got == form_len, (form_got, form_len)  # the whole form reached the backend
        print(
            f"form:     {form_s:6.1f} s ({args.size_mb / form_s:6.0f} MiB/s)  "
            f"web RSS start {form_start:6.1f} MB  peak {form_peak:6.1f} MB  end {form_end:6.1f} MB"
            "  (POST /v1/audio/transcriptions, relayed)"
        )
        print(f"web VmHWM (the kernel's peak RSS since the process started): {hwm:6.1f} MB")
    finally:
        router.stop()
        backend.stop()
        counter.stop()


if __name__ == "__main__":
    main()
