"""One run of a command (router/providers/cli/process.py) on real processes:
the environment, lines, the deadline, and the kill of the whole group."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import orjson
import pytest

from router.core.backend import BackendSpec, CliSpec
from router.core.errors import UnsupportedParameter
from router.providers.cli import CLI, process
from router.providers.cli.process import MINIMAL_PATH, Run, RunTimeout, child_env
from router.providers.estimate import ESTIMATE_HEADER, estimate_tokens
from router.request import Envelope

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable


def spec(timeout: float = 30.0, env: tuple[str, ...] = ()) -> CliSpec:
    return CliSpec(command=(PY,), env=env, cwd=str(ROOT), timeout=timeout)


async def gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.02)
    return False


def test_the_child_env_is_the_allowlist_plus_a_minimal_path() -> None:
    environ = {"A": "1", "B": "2", "PATH": "/opt/bin"}
    assert child_env(("A", "MISSING"), environ) == {"A": "1", "PATH": MINIMAL_PATH}
    assert child_env(("PATH", "B"), environ) == {"PATH": "/opt/bin", "B": "2"}


async def test_lines_keep_newlines_and_join_utf8_split_across_writes() -> None:
    code = (
        "import sys,time;o=sys.stdout.buffer;"
        "o.write('é'.encode()[:1]);o.flush();time.sleep(0.05);o.write('é'.encode()[1:]+b'\\nlast');o.flush()"
    )
    run = await Run.start(spec(), [PY, "-c", code], None)
    try:
        lines = [line async for line in run.lines()]
        assert await run.wait() == 0
    finally:
        await run.close()
    assert lines == ["é\n", "last"]


async def test_a_long_line_without_newline_is_sent_in_pieces_without_waiting() -> None:
    """The command then hangs: the first piece comes anyway (bounded buffering)."""
    code = f"import sys,time;sys.stdout.write('x'*{process.MAX_LINE_CHARS + 10});sys.stdout.flush();time.sleep(3600)"
    run = await Run.start(spec(), [PY, "-c", code], None)
    try:
        assert await anext(run.lines()) == "x" * process.MAX_LINE_CHARS
    finally:
        await run.close()


async def test_stdin_is_the_prompt_then_closed_and_stderr_is_a_bounded_tail() -> None:
    code = (
        "import sys;data=sys.stdin.read();"
        f"sys.stderr.write('e'*{process.STDERR_KEEP * 3}+'END');sys.stdout.write(data.upper())"
    )
    run = await Run.start(spec(), [PY, "-c", code], "héllo".encode())
    try:
        text = "".join([line async for line in run.lines()])
        assert await run.wait() == 0
    finally:
        await run.close()
    assert text == "HÉLLO"
    tail = run.stderr_tail()
    assert len(tail) == process.STDERR_KEEP and tail.endswith("END")


async def test_the_deadline_and_the_kill_reach_the_whole_group(tmp_path) -> None:
    """A grandchild that ignores SIGTERM goes too: the group gets SIGKILL after the grace."""
    pid_file = tmp_path / "grandchild"
    code = (
        "import subprocess,sys,time;"
        "p=subprocess.Popen([sys.executable,'-m','fakes.cli_model','--hang','--ignore-term',"
        f"'--pid-file','{pid_file}'],stdin=subprocess.DEVNULL);"
        "print('started',flush=True);time.sleep(3600)"
    )
    run = await Run.start(spec(timeout=1.0), [PY, "-c", code], None)
    lines = run.lines()
    assert await anext(lines) == "started\n"
    with pytest.raises(RunTimeout):
        await anext(lines)
    while not pid_file.exists():
        await asyncio.sleep(0.02)
    grandchild = int(pid_file.read_text())
    await run.close()
    assert run.proc.returncode is not None  # reaped: no zombie left
    assert await gone(grandchild)  # reparented to init, killed by the group's SIGKILL
    assert run.pid not in process._LIVE
    await run.close()  # idempotent


async def test_a_program_that_does_not_exist_is_an_oserror() -> None:
    with pytest.raises(OSError):
        await Run.start(spec(), [str(ROOT / "no-such-program")], None)


def envelope(endpoint: str, body: dict) -> Envelope:
    return Envelope(
        endpoint=endpoint,
        raw=b"",
        body=body,
        model="m",
        stream=False,
        headers={},
        client_ip="",
        host="",
        request_id="r",
    )


async def test_count_tokens_is_the_estimate_and_runs_nothing(tmp_path) -> None:
    pid_file = tmp_path / "pid"
    backend = BackendSpec(
        name="c",
        url="cli://c",
        kind="cli",
        models=("m",),
        cli=CliSpec(command=(PY, "-m", "fakes.cli_model", "--pid-file", str(pid_file)), cwd=str(ROOT)),
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hi there"}]}
    ex = await CLI.start(None, backend, envelope("messages/count_tokens", body), "m")
    assert (ex.status, ex.wire, ex.headers) == (200, "anthropic", [ESTIMATE_HEADER])
    assert orjson.loads(ex.body) == {"input_tokens": estimate_tokens(body)}
    with pytest.raises(UnsupportedParameter) as err:
        await CLI.start(None, backend, envelope("responses", {"model": "m", "input": "x"}), "m")
    assert "/v1/chat/completions" in err.value.message
    assert not pid_file.exists()
