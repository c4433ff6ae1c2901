"""One run of a cli backend's command, as asyncio sees it.

Invariants:
- Never a shell: `create_subprocess_exec(*argv)`.
- The child leads its own process group (`start_new_session=True`), so a
  kill reaches whatever it started too: SIGTERM to the group, SIGKILL after
  `GRACE_S`, then the child is reaped (no zombie). `close()` does it for a run
  that is still going (client gone, deadline passed, router error) and sweeps
  the group once more after a normal exit (stray grandchildren). A router
  that exits kills the groups of the runs still open (atexit); one killed
  outright leaves them to SIGPIPE on their next write.
- The child's environment is only the names of `cli.env` that the router's
  environment has, plus `PATH=MINIMAL_PATH` when PATH is not among them.
- stdin gets the prompt (or nothing) and is closed; stderr is drained all the
  time (a full pipe would stall the child) and only its last
  `STDERR_KEEP` bytes are kept, for the operator (never for the client).
- Every read waits at most until the run's deadline (`cli.timeout` from the
  start); past it, `RunTimeout`.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import contextlib
import os
import signal
from collections.abc import AsyncIterator

from router.core.backend import CliSpec

GRACE_S = 3.0  # between SIGTERM and SIGKILL
STDERR_KEEP = 4096  # bytes of stderr kept (the tail)
READ_SIZE = 65536
MAX_LINE_CHARS = 16384  # a longer line without a newline is sent in pieces
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"

_REAPERS: set[asyncio.Task] = set()  # kills in progress, kept from the GC
_LIVE: set[int] = set()  # process groups of the runs not yet closed


@atexit.register
def _kill_live_groups() -> None:
    """A router that exits (SIGTERM, a reload) takes its running commands along."""
    for pgid in list(_LIVE):
        _signal_group(pgid, signal.SIGKILL)


class RunTimeout(Exception):
    """The run passed its deadline (`cli.timeout`)."""


def child_env(names: tuple[str, ...], environ: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    env = {name: environ[name] for name in names if name in environ}
    env.setdefault("PATH", MINIMAL_PATH)
    return env


class Run:
    """A started command: its output as text lines, its exit, its kill."""

    def __init__(self, proc: asyncio.subprocess.Process, deadline: float, stdin: bytes | None) -> None:
        self.proc = proc
        self.deadline = deadline
        self._stderr = bytearray()
        self._tasks = [asyncio.get_running_loop().create_task(self._drain_stderr())]
        if proc.stdin is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(self._feed(stdin or b"")))
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._closed = False
        self.stdout_bytes = 0  # read so far
        _LIVE.add(proc.pid)

    @classmethod
    async def start(cls, cli: CliSpec, argv: list[str], stdin: bytes | None) -> Run:
        """Spawn `argv`; OSError when it cannot be (no such program, bad cwd)."""
        loop = asyncio.get_running_loop()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=child_env(cli.env),
            cwd=cli.cwd,
            start_new_session=True,
            close_fds=True,
        )
        return cls(proc, loop.time() + cli.timeout, stdin)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_tail(self) -> str:
        return bytes(self._stderr).decode("utf-8", errors="replace")

    def _remaining(self) -> float:
        remaining = self.deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise RunTimeout()
        return remaining

    async def _feed(self, data: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if data:
                stdin.write(data)
                await stdin.drain()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.close()

    async def _drain_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        while chunk := await stream.read(READ_SIZE):
            self._stderr += chunk
            if len(self._stderr) > STDERR_KEEP:
                del self._stderr[: len(self._stderr) - STDERR_KEEP]

    async def read(self) -> str | None:
        """The next piece of stdout as text (None at its end); RunTimeout past the deadline."""
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            chunk = await asyncio.wait_for(stdout.read(READ_SIZE), self._remaining())
        except TimeoutError:
            raise RunTimeout() from None
        self.stdout_bytes += len(chunk)
        if not chunk:
            tail = self._decoder.decode(b"", final=True)
            return tail or None
        return self._decoder.decode(chunk)

    async def lines(self) -> AsyncIterator[str]:
        """stdout line by line, each with its newline (the last may lack one)."""
        pending = ""
        while (text := await self.read()) is not None:
            pending += text
            while True:
                cut = pending.find("\n")
                if cut < 0:
                    break
                yield pending[: cut + 1]
                pending = pending[cut + 1 :]
            while len(pending) > MAX_LINE_CHARS:
                yield pending[:MAX_LINE_CHARS]
                pending = pending[MAX_LINE_CHARS:]
        if pending:
            yield pending

    async def wait(self) -> int:
        """The exit status (after stdout ended); RunTimeout past the deadline."""
        try:
            return await asyncio.wait_for(self.proc.wait(), self._remaining())
        except TimeoutError:
            raise RunTimeout() from None

    async def close(self) -> None:
        """Kill the process group if the command still runs, and reap it.
        Idempotent; runs to its end even when the caller is cancelled."""
        if self._closed:
            return
        self._closed = True
        task = asyncio.get_running_loop().create_task(self._kill())
        _REAPERS.add(task)
        task.add_done_callback(_REAPERS.discard)
        await asyncio.shield(task)

    async def _kill(self) -> None:
        proc = self.proc
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), GRACE_S)
            except TimeoutError:
                pass
        # SIGKILL the group even after a clean exit: what the command left
        # behind goes with it (ESRCH when nothing is left).
        _signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()  # reaped
        _LIVE.discard(proc.pid)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
