"""The `cli` kind end to end: a real router process runs real commands (the
fake model command, fakes/cli_model.py) and the official `openai` SDK reads
the answers — whole, streamed line by line, failed, timed out, abandoned."""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.mix.conftest import observation, rid
from tests.router.providers.openai_shapes import chat_sse, exact
from tests.support.routerproc import ROOT, RouterProc, wait_until

FAKE = [sys.executable, "-m", "fakes.cli_model"]
SECRET_STDERR = "stderr-secret-do-not-show-7f3a"


def backend(
    name: str,
    args: list[str],
    *,
    timeout: float = 60,
    env: list[str] | None = None,
    prompt: str = "stdin",
    served: str | None = None,
) -> dict:
    cli: dict = {"command": [*FAKE, *args], "cwd": str(ROOT), "timeout": timeout, "prompt": prompt}
    if env is not None:
        cli["env"] = env
    out: dict = {"name": name, "kind": "cli", "models": [name], "cli": cli}
    if served:
        out["served_model"] = served
    return out


@pytest.fixture(scope="module")
def pids() -> Path:
    return Path(tempfile.mkdtemp(prefix="cli-pids-"))


@pytest.fixture(scope="module")
def router(pids: Path):
    backends = [
        backend("cli-ok", ["--model", "{model}"]),
        backend("cli-arg", ["--prompt", "{prompt}", "--model", "{model}"], prompt="argument", served="served-x"),
        backend("cli-slow", ["--lines", "4", "--delay", "0.05"]),
        backend("cli-hang", ["--lines", "5", "--after-lines", "2", "--hang", "--pid-file", str(pids / "hang")]),
        backend("cli-timeout", ["--hang", "--ignore-term", "--pid-file", str(pids / "timeout")], timeout=1),
        backend(
            "cli-stream-timeout",
            ["--lines", "3", "--after-lines", "1", "--hang", "--pid-file", str(pids / "stream-timeout")],
            timeout=2,
        ),
        backend("cli-fail", ["--fail", "3", "--stderr", SECRET_STDERR]),
        backend("cli-fail-late", ["--lines", "3", "--after-lines", "1", "--fail", "4", "--stderr", SECRET_STDERR]),
        backend("cli-tools", ["--pid-file", str(pids / "tools")]),
        backend("cli-env", ["--lines", "0", "--echo-env", "CLI_SEEN", "--echo-env", "CLI_HIDDEN"], env=["CLI_SEEN"]),
        backend("cli-missing", []) | {"cli": {"command": [str(ROOT / "no-such-program")]}},
        backend("cli-big", ["--lines", "200"]),
        backend("cli-hang-whole", ["--hang", "--pid-file", str(pids / "hang-whole")]),
    ]
    config = json.dumps({"backends": backends, "retry": {"backoff": 0}, "server": {"max_response_bytes": 2048}})
    with RouterProc(config, env={"CLI_SEEN": "seen-value", "CLI_HIDDEN": "hidden-value"}) as proc:
        yield proc


@pytest.fixture
def client(router) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0, timeout=60)


def hi(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi there"}], **extra}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def pid_of(path: Path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text(), 30, what=f"pid file {path}"))


def test_a_whole_answer_is_an_exact_chat_completion(router, client) -> None:
    answer = client.chat.completions.create(**hi("cli-ok"))
    assert answer.choices[0].message.content == "Hello from cli-ok.\nYou said: hi there\nLine 3 of 3.\n"
    assert answer.choices[0].finish_reason == "stop" and answer.model == "cli-ok"
    assert answer.id.startswith("chatcmpl-")
    # The raw body is exactly the SDK type; usage is the documented estimate.
    request_id = rid()
    r = httpx.post(
        router.url + "/v1/chat/completions",
        json=hi("cli-ok", temperature=0.2),
        timeout=60,
        headers={"x-request-id": request_id},
    )
    obj = exact(ChatCompletion, r.json())
    text = obj.choices[0].message.content
    assert obj.usage.completion_tokens == -(-len(text) // 4) and obj.usage.prompt_tokens > 0
    obs = observation(router, request_id)
    assert (obs["kind"], obs["path"], obs["adapter"]) == ("cli", "normalized", "cli")
    assert obs["ignored_fields"] == ["temperature"]


def test_the_prompt_as_an_argument_and_the_served_model(client) -> None:
    answer = client.chat.completions.create(**hi("cli-arg"))
    assert answer.choices[0].message.content.startswith("Hello from served-x.\nYou said: hi there\n")


def test_a_stream_is_the_commands_stdout_line_by_line(router) -> None:
    body = hi("cli-slow", stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        frames = [f + b"\n\n" for f in r.read().split(b"\n\n") if f]
    events = chat_sse(frames)
    assert events[-1] == "[DONE]"
    chunks = [exact(ChatCompletionChunk, e) for e in events[:-1]]
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert contents == ["Hello from cli-model.\n", "You said: hi there\n", "Line 3 of 4.\n", "Line 4 of 4.\n"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == -(-len("".join(contents)) // 4)


def test_lines_arrive_while_the_command_runs_and_leaving_kills_its_group(client, pids) -> None:
    """Two lines come through while the command still runs (it then hangs);
    the client leaving kills the whole process group and reaps the child."""
    stream = client.chat.completions.create(**hi("cli-hang"), stream=True)
    got = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            got.append(chunk.choices[0].delta.content)
        if len(got) == 2:
            break
    pid = pid_of(pids / "hang")
    assert got == ["Hello from cli-model.\n", "You said: hi there\n"]
    assert not gone(pid)  # still running: the lines were streamed, not buffered
    stream.close()
    wait_until(lambda: gone(pid), 30, what="the command's process to be killed and reaped")


def test_leaving_while_a_whole_answer_is_awaited_kills_the_group(router, pids) -> None:
    body = json.dumps(hi("cli-hang-whole")).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    with socket.create_connection(("127.0.0.1", router.port), timeout=30) as sock:
        sock.sendall(request)
        pid = pid_of(pids / "hang-whole")
        assert not gone(pid)
    wait_until(lambda: gone(pid), 30, what="the command to be killed when the client left")


def test_a_timeout_kills_the_group_and_is_a_504(client, pids) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**hi("cli-timeout"))
    assert err.value.status_code == 504
    # --ignore-term: only the SIGKILL after the grace period ends it.
    pid = pid_of(pids / "timeout")
    wait_until(lambda: gone(pid), 30, what="the timed-out command to be killed")


def test_a_timeout_mid_stream_ends_with_one_error_frame(router, pids) -> None:
    with httpx.stream(
        "POST", router.url + "/v1/chat/completions", json=hi("cli-stream-timeout", stream=True), timeout=60
    ) as r:
        frames = [f + b"\n\n" for f in r.read().split(b"\n\n") if f]
    events = chat_sse(frames)
    assert events[0]["choices"][0]["delta"]["content"] == "Hello from cli-model.\n"
    assert events[-1]["error"]["code"] == "upstream_timeout" and "[DONE]" not in events
    wait_until(lambda: gone(pid_of(pids / "stream-timeout")), 30, what="the command to be killed")


def test_a_failed_command_is_a_502_that_names_the_status_not_stderr(client, router) -> None:
    request_id = rid()
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**hi("cli-fail"), extra_headers={"x-request-id": request_id})
    assert err.value.status_code == 502
    message = err.value.response.text
    assert "the command exited with status 3" in message
    assert SECRET_STDERR not in message
    # The operator sees the stderr tail in the request's observation.
    assert SECRET_STDERR in observation(router, request_id)["failure_details"]["cli-fail"]


def test_a_failure_after_output_is_one_error_frame(router) -> None:
    request_id = rid()
    with httpx.stream(
        "POST",
        router.url + "/v1/chat/completions",
        json=hi("cli-fail-late", stream=True),
        timeout=60,
        headers={"x-request-id": request_id},
    ) as r:
        raw = r.read()
    events = chat_sse([f + b"\n\n" for f in raw.split(b"\n\n") if f])
    assert events[0]["choices"][0]["delta"]["content"] == "Hello from cli-model.\n"
    assert events[-1]["error"]["code"] == "upstream_error"
    assert "the command exited with status 4" in events[-1]["error"]["message"]
    assert SECRET_STDERR.encode() not in raw and "[DONE]" not in events
    obs = observation(router, request_id)
    assert obs["stream_error"] is True and SECRET_STDERR in obs["failure_details"]["cli-fail-late"]


def test_tools_are_refused_before_anything_runs(client, pids) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**hi("cli-tools"), tools=[tool])
    assert err.value.code == "unsupported_parameter" and err.value.param == "tools"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="cli-tools",
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}
            ],
        )
    assert not (pids / "tools").exists()
    client.chat.completions.create(**hi("cli-tools"))  # the same backend does run
    assert (pids / "tools").exists()


def test_only_the_listed_environment_reaches_the_command(client) -> None:
    answer = client.chat.completions.create(**hi("cli-env"))
    assert answer.choices[0].message.content == "CLI_SEEN=seen-value\nCLI_HIDDEN unset\n"


def test_a_command_that_cannot_start_is_a_502(client) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**hi("cli-missing"))
    assert err.value.status_code == 502
    assert "could not start" in err.value.response.text


def test_a_whole_answer_beyond_max_response_bytes_is_a_502(client) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**hi("cli-big"))
    assert err.value.status_code == 502 and "exceeds server.max_response_bytes (2048 bytes)" in err.value.message


def test_other_endpoints_name_what_works(client) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="cli-ok", input="x")
    assert "/v1/chat/completions" in err.value.message


# -- the Anthropic door: converted to chat before routing ------------------------------


@pytest.fixture
def claude(router):
    import anthropic

    return anthropic.Anthropic(base_url=router.url, api_key="x", max_retries=0, timeout=60)


def test_the_anthropic_door_gets_the_commands_answer(claude) -> None:
    ask = {"model": "cli-ok", "max_tokens": 100, "messages": [{"role": "user", "content": "hi there"}]}
    message = claude.messages.create(**ask)
    assert message.content[0].text == "Hello from cli-ok.\nYou said: hi there\nLine 3 of 3.\n"
    assert message.stop_reason == "end_turn"
    with claude.messages.stream(**ask) as stream:
        text = "".join(stream.text_stream)
    assert text == message.content[0].text


def test_the_demo_cli_backend_runs_as_configured() -> None:
    """fakes/demo.yaml's command works as `make run` starts it: the router's
    working directory is the repo root, the child gets only a minimal PATH."""
    import yaml

    demo = yaml.safe_load((ROOT / "fakes" / "demo.yaml").read_text())
    (entry,) = [b for b in demo["backends"] if b.get("kind") == "cli"]
    with RouterProc(json.dumps({"backends": [entry]})) as proc:
        client = openai.OpenAI(base_url=proc.url + "/v1", api_key="x", max_retries=0, timeout=60)
        stream = client.chat.completions.create(
            model=entry["models"][0], messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith(f"Hello from {entry['models'][0]}.\nYou said: hi\n") and text.endswith("Line 5 of 5.\n")
