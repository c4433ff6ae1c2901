"""The pure half of the cli kind (router/providers/cli/convert.py): the prompt
rendering, the argv, the field policy, and the exact OpenAI shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from router.core.backend import CliSpec
from router.core.errors import UnsupportedParameter, UpstreamError
from router.providers.cli.convert import CHAT_POLICY, ChatStream, argv, chat_completion, chat_prompt, render
from tests.router.providers.openai_shapes import chat_sse, exact


def body(messages: list[dict], **extra) -> dict:
    return {"model": "m", "messages": messages, **extra}


def test_one_user_message_is_its_text_exactly() -> None:
    assert render([{"role": "user", "content": "  hi\nthere "}]) == "  hi\nthere "
    assert render([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]) == "ab"


def test_a_conversation_is_role_blocks() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": "no markdown"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
    ]
    assert render(messages) == (
        "System: be brief\n\nSystem: no markdown\n\nUser: hi\n\nAssistant: hello\n\nUser: again"
    )
    assert render([{"role": "system", "content": "s"}]) == "System: s"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "tool", "tool_call_id": "c", "content": "x"}], "messages[0].role"),
        ([{"role": "function", "name": "f", "content": "x"}], "messages[0].role"),
        (
            [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            ],
            "messages[1].tool_calls",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/i.png"}}]}],
            "messages[0].content[0]",
        ),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}],
            "messages[0].content[0]",
        ),
    ],
)
def test_what_a_command_cannot_take_is_refused(messages, param) -> None:
    with pytest.raises(UnsupportedParameter) as err:
        chat_prompt(body(messages))
    assert err.value.param == param


HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {}}}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [TOOL]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"web_search_options": {}}, "web_search_options"),
    ],
)
def test_unsupported_fields_are_400s(extra, param) -> None:
    with pytest.raises(UnsupportedParameter) as err:
        chat_prompt(body(HI, **extra))
    assert err.value.param == param and err.value.status == 400


def test_harmless_values_pass_and_ignored_fields_are_named() -> None:
    prompt = chat_prompt(
        body(
            HI,
            n=1,
            logprobs=False,
            tools=[],
            tool_choice="none",
            response_format={"type": "text"},
            temperature=0.1,
            max_tokens=5,
            x_custom=1,
            stream=True,
            stop=None,
        )
    )
    assert prompt.text == "hi"
    assert prompt.ignored_fields == ["temperature", "max_tokens", "x_custom", "tool_choice"]
    assert "x_custom: unknown field, not passed to the command" in prompt.notes


def test_argv_substitution() -> None:
    stdin = CliSpec(command=("run", "--model={model}", "{prompt}"))
    assert argv(stdin, "ignored", "served") == ["run", "--model=served", "{prompt}"]
    arg = CliSpec(command=("run", "-m", "{model}", "-p", "say: {prompt}!"), prompt="argument")
    # One pass: a prompt holding a placeholder stays as typed.
    assert argv(arg, "use {model} {prompt}", "s") == ["run", "-m", "s", "-p", "say: use {model} {prompt}!"]


def test_the_whole_answer_is_an_exact_chat_completion() -> None:
    out = chat_completion("two\nlines\n", model="m", completion_id="chatcmpl-1", created=1, prompt_tokens=8)
    obj = exact(ChatCompletion, out)
    assert obj.choices[0].message.content == "two\nlines\n" and obj.choices[0].finish_reason == "stop"
    assert obj.usage.model_dump(exclude_none=True) == {"prompt_tokens": 8, "completion_tokens": 3, "total_tokens": 11}


@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_chunks_are_exact(include_usage) -> None:
    stream = ChatStream(model="m", completion_id="chatcmpl-2", created=1, include_usage=include_usage, prompt_tokens=5)
    frames = stream.line("a\n") + stream.line("") + stream.line("bcd\n") + stream.finish() + stream.finish()
    events = chat_sse(frames)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [exact(ChatCompletionChunk, e) for e in events[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == "a\n"
    assert chunks[1].choices[0].delta.content == "bcd\n" and chunks[1].choices[0].delta.role is None
    assert chunks[2].choices[0].finish_reason == "stop"
    assert stream.usage == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    if include_usage:
        assert len(chunks) == 4 and chunks[3].choices == [] and chunks[3].usage.total_tokens == 7
    else:
        assert len(chunks) == 3 and all(c.usage is None for c in chunks)


def test_an_empty_stream_still_names_the_role_and_a_failure_is_one_frame() -> None:
    empty = ChatStream(model="m", completion_id="c", created=1, include_usage=False, prompt_tokens=1)
    events = chat_sse(empty.finish())
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    failing = ChatStream(model="m", completion_id="c", created=1, include_usage=False, prompt_tokens=1)
    failing.line("x\n")
    (frame,) = failing.fail(UpstreamError("boom"))
    assert chat_sse([frame])[0]["error"]["message"] == "boom"
    assert failing.fail(UpstreamError("again")) == [] and failing.finish() == []


def test_the_docs_policy_table_is_the_code() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "providers" / "cli.md").read_text()
    section = text.split("## Request mapping (Chat Completions)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    documented = [tuple(cell.strip().strip("`") for cell in row.strip("|").split(" | ")) for row in rows]
    assert documented == [(field, policy, note) for field, (policy, note) in CHAT_POLICY.items()]
