"""The `cli` provider, normalized path: a backend that is a local command.

`start()` converts the Chat Completions body to a prompt (a field the
command cannot honour is a 400 before anything runs), spawns the command
(router/providers/cli/process.py) and reads its answer: all of stdout and
the exit (non-streamed), or up to its first line (streamed), so a command
that fails before answering is still retried elsewhere (`UpstreamFailed`).
The command's stderr never reaches the client: on a failure its tail is
logged and kept in the request's observation (`failure_details`), and the
exchange keeps it in `info["stderr"]`.

Never probed (there is no URL), lists no models; `capacity` (default 1,
router/config_schema.py) is how many runs one web process starts at once.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from ...core.backend import BackendSpec
from ...core.errors import RouterError, UnsupportedParameter, UpstreamError, UpstreamTimeout
from ...request import Envelope
from ..base import Exchange, UpstreamFailed
from ..estimate import estimate_tokens, estimated_count
from ..relay import empty
from . import convert
from .process import Run, RunTimeout

log = logging.getLogger(__name__)

STDERR_LOGGED = 2000  # characters of stderr a failure's log line carries


class CliProvider:
    """A configured command; stdout is the answer."""

    kinds = frozenset({"cli"})
    path = "normalized"
    runs_command = True  # its config is an argv: YAML only, never the admin

    def probe_url(self, spec: BackendSpec, path: str) -> str | None:
        return None  # a command is not probed; it is judged by its runs

    def probe_headers(self, spec: BackendSpec) -> dict[str, str]:
        return {}

    def load_url(self, spec: BackendSpec, path: str) -> str | None:
        return None  # publishes no load the router reads

    def listed_models(self, data: dict[str, Any]) -> list[str] | None:
        return None

    async def start(self, rt, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        if env.endpoint == "messages/count_tokens":
            return estimated_count(spec, env.body, model)
        if env.endpoint != "chat/completions":
            raise UnsupportedParameter(
                f"/v1/{env.endpoint} is not available from the selected provider (a command); "
                "use /v1/chat/completions.",
            )
        cli = spec.cli
        if cli is None:  # a row without its cli section (config always has one)
            raise UpstreamFailed(f"{spec.name} has no command configured")
        prompt = convert.chat_prompt(env.body)  # raises before anything runs
        served = spec.served_name(model)
        argv = convert.argv(cli, prompt.text, served)
        stdin = prompt.text.encode() if cli.prompt == "stdin" else None
        info: dict[str, Any] = {
            "served": served,
            "adapter": "cli",
            "ignored_fields": prompt.ignored_fields,
            "notes": prompt.notes,
        }
        started = time.perf_counter()
        try:
            run = await Run.start(cli, argv, stdin)
        except OSError as exc:  # no such program, not executable, bad cwd
            raise UpstreamFailed(f"the command of {spec.name} could not start ({type(exc).__name__})") from exc
        info["pid"] = run.pid
        prompt_tokens = estimate_tokens(env.body)
        completion_id = "chatcmpl-" + secrets.token_hex(12)
        now = int(time.time())
        try:
            if not env.stream:
                text = await _whole(run, spec, env.max_response_bytes)
                ms = (time.perf_counter() - started) * 1000.0
                out = convert.chat_completion(
                    text, model=env.model, completion_id=completion_id, created=now, prompt_tokens=prompt_tokens
                )
                info["usage"] = out["usage"]
                info["stderr"] = run.stderr_tail()
                await run.close()
                return Exchange(spec, 200, [], "application/json", orjson.dumps(out), upstream_ms=ms, info=info)
            options = env.body.get("stream_options")
            translator = convert.ChatStream(
                model=env.model,
                completion_id=completion_id,
                created=now,
                prompt_tokens=prompt_tokens,
                include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
            )
            lines = run.lines()
            first = await anext(lines, None)
            ms = (time.perf_counter() - started) * 1000.0
            if first is None:  # no output at all: the exit decides
                await _exited_ok(run, spec)
                head = translator.finish()
                rest: AsyncIterator[bytes] = empty()
            else:
                head = translator.line(first)
                rest = _rest(run, spec, lines, translator)
        except RunTimeout:
            await run.close()
            raise UpstreamFailed(
                f"the command of {spec.name} ran past its {cli.timeout:g}s timeout",
                timeout=True,
                detail=run.stderr_tail(),
            ) from None
        except BaseException:
            await run.close()
            raise
        info["translator"] = translator
        info["run"] = run
        return Exchange(
            spec, 200, [], "text/event-stream", b"".join(head), stream=rest, close=run.close, upstream_ms=ms, info=info
        )

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        """The converted whole body (`start` already built it)."""
        return ex.body, {"usage": ex.info.get("usage")}

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        return _relay(ex, done)


def _failed(run: Run, spec: BackendSpec, status: int) -> str:
    """The reason of a non-zero exit (for the client); stderr goes to the log only."""
    reason = (
        f"the command exited with status {status}" if status >= 0 else f"the command was killed by signal {-status}"
    )
    log.warning("cli backend %s: %s; stderr tail: %s", spec.name, reason, run.stderr_tail()[-STDERR_LOGGED:])
    return reason


async def _exited_ok(run: Run, spec: BackendSpec) -> None:
    status = await run.wait()
    if status != 0:
        raise UpstreamFailed(_failed(run, spec, status), detail=run.stderr_tail())


async def _whole(run: Run, spec: BackendSpec, max_bytes: int) -> str:
    """All of stdout, then the exit: 0 → the text; else UpstreamFailed."""
    parts: list[str] = []
    while (text := await run.read()) is not None:
        if run.stdout_bytes > max_bytes:
            raise UpstreamFailed(f"the command's output exceeds server.max_response_bytes ({max_bytes} bytes)")
        parts.append(text)
    await _exited_ok(run, spec)
    return "".join(parts)


async def _rest(
    run: Run, spec: BackendSpec, lines: AsyncIterator[str], translator: convert.ChatStream
) -> AsyncIterator[bytes]:
    """The lines after the first as SSE bytes; the exit decides the end."""
    try:
        async for line in lines:
            yield b"".join(translator.line(line))
        status = await run.wait()
    except RunTimeout:
        raise UpstreamTimeout(f"The command ran past its {run_timeout(spec):g}s timeout mid-stream.") from None
    if status != 0:
        raise UpstreamError(f"The provider failed mid-stream: {_failed(run, spec, status)}.")
    yield b"".join(translator.finish())


def run_timeout(spec: BackendSpec) -> float:
    return spec.cli.timeout if spec.cli is not None else 0.0


async def _relay(ex: Exchange, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
    translator: convert.ChatStream = ex.info["translator"]
    ok: bool | None = None
    try:
        if ex.body:
            yield ex.body
        async for data in ex.stream:  # type: ignore[union-attr]
            if data:
                yield data
        ok = True
    except RouterError as exc:
        ok = False
        yield b"".join(translator.fail(exc))
    finally:
        if ex.close is not None:
            await ex.close()
        ex.info["stderr"] = tail = ex.info["run"].stderr_tail()
        done(ok, {"usage": translator.usage, "detail": tail if ok is False else ""})


CLI = CliProvider()
