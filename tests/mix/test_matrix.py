"""Every front door onto every provider kind (issue 10's matrix).

{OpenAI Chat Completions, Responses, Anthropic Messages} × {openai_compat,
ollama, anthropic, gemini, cli} × {stream, non-stream} × {plain, tool call}:
each cell goes through the official client SDK (`openai`, `anthropic`) into
one real router process and out to a real fake upstream of that kind (real
HTTP on loopback, or a real subprocess for `cli`). A cell either works end
to end — the answer parses as the SDK's own type, a tool call arrives and its
result is accepted on the next turn — or is the documented 400 before
dispatch (`cli` takes no tools: docs/providers/cli.md), with nothing run.

Also here: a fallback chain from a dead vLLM-style model to a Gemini-kind and
then an Anthropic-kind model, streaming through the `openai` SDK.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import anthropic
import openai
import pytest

from fakes import anthropic_backend, gemini_backend, ollama_backend, openai_backend
from fakes.server import ServerThread
from tests.support.routerproc import RouterProc, free_port

KINDS = ("openai_compat", "ollama", "anthropic", "gemini", "cli")
DOORS = ("chat", "responses", "messages")
TOOLLESS = {"cli"}  # kinds whose tool cells are the documented 400

CONFIG = """
backends:
  - name: b-openai
    url: {openai}
    models: [m-openai_compat, m-dead-fallback-target-unused]
  - name: b-ollama
    url: {ollama}
    kind: ollama
    models: [m-ollama]
    served_model: llama3.2
  - name: b-anthropic
    url: {anthropic}
    kind: anthropic
    api_key: sk-ant-test
    models: [m-anthropic]
    served_model: claude-sonnet-4-5
  - name: b-gemini
    url: {gemini}
    kind: gemini
    api_key: {gemini_key}
    models: [m-gemini]
    served_model: gemini-2.5-flash
  - name: b-cli
    kind: cli
    models: [m-cli]
    cli:
      command: [{python}, -m, fakes.cli_model, --pid-file, {pids}/cli.pid]
      cwd: {root}
      timeout: 60
  - name: b-dead
    url: http://127.0.0.1:{dead}
    models: [m-dead]
  - name: b-gemini-2
    url: {gemini2}
    kind: gemini
    api_key: {gemini_key}
    models: [m-gemini-fallback]
    served_model: gemini-2.5-flash
  - name: b-anthropic-2
    url: {anthropic}
    kind: anthropic
    api_key: sk-ant-test
    models: [m-anthropic-fallback]
    served_model: claude-sonnet-4-5
fallback:
  fallback_chains:
    m-dead: [m-gemini-fallback, m-anthropic-fallback]
health:
  enabled: false
  failure_threshold: 1000
retry:
  max_attempts: 3
  backoff: 0
"""

WEATHER_Q = "What is the weather in Paris?"
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
RESPONSES_TOOL = {"type": "function", **CHAT_TOOL["function"]}
ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": CHAT_TOOL["function"]["parameters"],
}


class Stack:
    def __init__(self, router: RouterProc, servers: dict[str, ServerThread], pids: Path) -> None:
        self.router, self.servers, self.pids = router, servers, pids

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.router.url + "/v1", api_key="sk-any", max_retries=0, timeout=60)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.router.url, api_key="sk-any", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    pids = tmp_path_factory.mktemp("cli-pids")
    servers = {
        "openai": openai_backend.server_thread("b-openai", ["m-openai_compat"]).start(),
        "ollama": ollama_backend.server_thread("b-ollama", ["llama3.2"]).start(),
        "anthropic": anthropic_backend.server_thread(
            "b-anthropic", ["claude-sonnet-4-5"], api_key="sk-ant-test"
        ).start(),
        "gemini": gemini_backend.server_thread("b-gemini", ["gemini-2.5-flash"]).start(),
        "gemini2": gemini_backend.server_thread("b-gemini-2", ["gemini-2.5-flash"]).start(),
    }
    root = Path(__file__).resolve().parents[2]
    config = CONFIG.format(
        openai=servers["openai"].url,
        ollama=servers["ollama"].url,
        anthropic=servers["anthropic"].url,
        gemini=servers["gemini"].url,
        gemini2=servers["gemini2"].url,
        dead=free_port(),
        python=json.dumps(sys.executable),
        pids=pids,
        root=root,
        gemini_key=gemini_backend.FAKE_API_KEY,
    )
    router = RouterProc(config).start()
    try:
        yield Stack(router, servers, pids)
    finally:
        router.stop()
        for server in servers.values():
            server.stop()


# -- one cell per door: (text answer, tool call name and arguments) -------------------


def _chat(stack: Stack, model: str, stream: bool, tool: bool) -> tuple[str, list[tuple[str, dict]]]:
    client = stack.openai()
    messages: list[dict] = [{"role": "user", "content": WEATHER_Q if tool else f"Hello {uuid.uuid4().hex[:8]}"}]
    extra = {"tools": [CHAT_TOOL]} if tool else {}
    text, calls = _chat_once(client, model, messages, stream, extra)
    if calls:  # the tool's result goes back; the provider must accept the turn
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for cid, name, args in calls
                ],
            }
        )
        messages += [{"role": "tool", "tool_call_id": cid, "content": '{"temp_c": 21}'} for cid, _, _ in calls]
        _chat_once(client, model, messages, stream, extra)
    return text, [(name, args) for _, name, args in calls]


def _chat_once(client, model, messages, stream, extra) -> tuple[str, list[tuple[str, str, dict]]]:
    if not stream:
        completion = client.chat.completions.create(model=model, messages=messages, **extra)
        assert isinstance(completion, openai.types.chat.ChatCompletion)
        choice = completion.choices[0]
        assert completion.usage is not None and completion.usage.completion_tokens >= 0
        calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or ()]
        assert choice.finish_reason == ("tool_calls" if calls else "stop")
        return choice.message.content or "", calls
    text, parts, finish, usage = [], {}, None, None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}, **extra
    ):
        assert isinstance(chunk, openai.types.chat.ChatCompletionChunk)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            for call in choice.delta.tool_calls or ():
                part = parts.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                part["id"] = call.id or part["id"]
                if call.function is not None:
                    part["name"] += call.function.name or ""
                    part["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert usage is not None, "include_usage asked for a usage chunk"
    calls = [(p["id"], p["name"], json.loads(p["arguments"])) for p in parts.values()]
    assert finish == ("tool_calls" if calls else "stop")
    return "".join(text), calls


def _responses(stack: Stack, model: str, stream: bool, tool: bool) -> tuple[str, list[tuple[str, dict]]]:
    client = stack.openai()
    items: list = [{"role": "user", "content": WEATHER_Q if tool else f"Hello {uuid.uuid4().hex[:8]}"}]
    extra = {"tools": [RESPONSES_TOOL]} if tool else {}
    response = _responses_once(client, model, items, stream, extra)
    calls = [item for item in response.output if item.type == "function_call"]
    if calls:
        items += [
            {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls
        ]
        items += [{"type": "function_call_output", "call_id": c.call_id, "output": '{"temp_c": 21}'} for c in calls]
        _responses_once(client, model, items, stream, extra)
    return response.output_text, [(c.name, json.loads(c.arguments)) for c in calls]


def _responses_once(client, model, items, stream, extra):
    if not stream:
        response = client.responses.create(model=model, input=items, **extra)
    else:
        response = None
        kinds = []
        for event in client.responses.create(model=model, input=items, stream=True, **extra):
            kinds.append(event.type)
            if event.type == "response.completed":
                response = event.response
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert isinstance(response, openai.types.responses.Response)
    assert response.status == "completed" and response.usage is not None
    return response


def _messages(stack: Stack, model: str, stream: bool, tool: bool) -> tuple[str, list[tuple[str, dict]]]:
    client = stack.anthropic()
    turns: list[dict] = [{"role": "user", "content": WEATHER_Q if tool else f"Hello {uuid.uuid4().hex[:8]}"}]
    extra = {"tools": [ANTHROPIC_TOOL]} if tool else {}
    message = _messages_once(client, model, turns, stream, extra)
    uses = [b for b in message.content if b.type == "tool_use"]
    if uses:
        turns.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        turns.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": b.id, "content": '{"temp_c": 21}'} for b in uses],
            }
        )
        _messages_once(client, model, turns, stream, extra)
    text = "".join(b.text for b in message.content if b.type == "text")
    return text, [(b.name, b.input) for b in uses]


def _messages_once(client, model, turns, stream, extra):
    if not stream:
        message = client.messages.create(model=model, max_tokens=256, messages=turns, **extra)
    else:
        with client.messages.stream(model=model, max_tokens=256, messages=turns, **extra) as events:
            message = events.get_final_message()
    assert isinstance(message, anthropic.types.Message)
    assert message.stop_reason in ("end_turn", "tool_use", "max_tokens", "stop_sequence")
    assert (message.stop_reason == "tool_use") == any(b.type == "tool_use" for b in message.content)
    return message


DOOR = {"chat": _chat, "responses": _responses, "messages": _messages}
BAD_REQUEST = {
    "chat": openai.BadRequestError,
    "responses": openai.BadRequestError,
    "messages": anthropic.BadRequestError,
}


@pytest.mark.parametrize("tool", [False, True], ids=["plain", "tool"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("door", DOORS)
def test_every_door_reaches_every_kind(stack, door, kind, stream, tool):
    model = f"m-{kind}"
    if tool and kind in TOOLLESS:
        pid_file = stack.pids / "cli.pid"
        pid_file.unlink(missing_ok=True)
        with pytest.raises(BAD_REQUEST[door]) as refused:
            DOOR[door](stack, model, stream, tool)
        assert refused.value.status_code == 400
        assert "tools" in str(refused.value.message)
        assert not pid_file.exists(), "refused before dispatch: the command never ran"
        return
    text, calls = DOOR[door](stack, model, stream, tool)
    if tool:
        assert [name for name, _ in calls] == ["get_weather"], calls
        assert isinstance(calls[0][1], dict)
    else:
        assert text.strip(), "a plain answer has text"
        assert calls == []


# -- a dead local model falls back to cloud kinds ---------------------------------------


def _stream_text(stack: Stack, model: str) -> tuple[str, str]:
    chunks = list(
        stack.openai().chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Hello there"}],
            stream=True,
        )
    )
    assert chunks and all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[0].model


def test_a_dead_model_falls_back_to_gemini_then_anthropic_streaming(stack):
    gemini2 = stack.servers["gemini2"]
    before = len(gemini2.requests)
    text, model = _stream_text(stack, "m-dead")
    assert text and model == "m-dead"
    assert len(gemini2.requests) > before, "the Gemini-kind hop answered"
    gemini2.stop()  # now the second hop is dead too: the Anthropic kind answers
    try:
        anthropic_fake = stack.servers["anthropic"]
        before = len(anthropic_fake.requests)
        text, model = _stream_text(stack, "m-dead")
        assert text and model == "m-dead"
        assert len(anthropic_fake.requests) > before, "the Anthropic-kind hop answered"
    finally:
        gemini2.start()


# -- the Anthropic door onto an Anthropic-kind backend: no double translation ----------


def test_the_anthropic_door_sends_its_own_body_to_an_anthropic_kind(stack):
    """The client's Messages body goes upstream as sent (only `model` becomes the
    served name), Anthropic-only fields included, and the answer comes back as
    the provider's own message."""
    fake = stack.servers["anthropic"]
    marker = uuid.uuid4().hex
    sent = {
        "model": "m-anthropic",
        "max_tokens": 64,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": f"Hello {marker}"}]}],
        "metadata": {"user_id": "u-1"},
    }
    message = stack.anthropic().messages.create(**sent, extra_body={"top_k": 7})
    assert isinstance(message, anthropic.types.Message) and message.model == "m-anthropic"
    with stack.anthropic().messages.stream(**sent, extra_body={"top_k": 7}) as events:
        assert events.get_final_message().model == "m-anthropic"
    sent["top_k"] = 7
    got = [json.loads(r.body) for r in fake.requests if r.path == "/v1/messages" and marker.encode() in r.body]
    assert got == [{**sent, "model": "claude-sonnet-4-5"}, {**sent, "model": "claude-sonnet-4-5", "stream": True}]


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
def test_count_tokens_is_the_providers_own_count_where_it_can(stack, kind):
    marker = uuid.uuid4().hex
    raw = stack.anthropic().messages.with_raw_response.count_tokens(
        model=f"m-{kind}",
        messages=[{"role": "user", "content": f"Count me {marker}"}],
    )
    assert "x-token-count" not in raw.headers, "the provider counted: no estimate mark"
    assert raw.parse().input_tokens > 0
    fake = stack.servers[kind]
    assert any(marker.encode() in r.body and "count" in r.path.lower() for r in fake.requests)
