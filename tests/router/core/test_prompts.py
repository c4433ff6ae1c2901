"""The pure part of global prompts: which prompt a request gets, and how it
meets the client's own system prompt on each wire format; the section's
files and their limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from router import global_prompts
from router.config_schema import ConfigError, parse
from router.core.prompts import Prompt, PromptPolicy, merge_anthropic, merge_chat, merge_responses

P = Prompt("Rules.", "prepend", "default")
APPEND = Prompt("Rules.", "append", "default")
REPLACE = Prompt("Rules.", "replace", "default")


def test_the_backend_override_wins_then_the_model_then_the_default() -> None:
    model, backend = Prompt("M", "append", "model x"), Prompt("B", "replace", "backend b")
    policy = PromptPolicy(default=P, models={"x": model, "off": None}, backends={"b": backend})
    assert policy.pick("x", "b") is backend and policy.pick("x", "a") is model
    assert policy.pick("y", "a") is P and policy.pick("off", "a") is None


def test_chat_merges_into_the_leading_system_message_and_never_changes_the_input() -> None:
    body = {"model": "m", "messages": [{"role": "developer", "content": "Mine."}, {"role": "user", "content": "hi"}]}
    assert merge_chat(body, P)["messages"][0] == {"role": "developer", "content": "Rules.\n\nMine."}
    assert merge_chat(body, APPEND)["messages"][0] == {"role": "developer", "content": "Mine.\n\nRules."}
    assert body["messages"][0]["content"] == "Mine."  # a new body each time
    parts = {"messages": [{"role": "system", "content": [{"type": "text", "text": "Mine."}]}]}
    assert merge_chat(parts, P)["messages"][0]["content"] == [
        {"type": "text", "text": "Rules."}, {"type": "text", "text": "Mine."},
    ]
    later = {"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]}
    assert merge_chat(later, P)["messages"] == [{"role": "system", "content": "Rules."}, *later["messages"]]


def test_chat_replace_drops_every_system_and_developer_message() -> None:
    body = {"messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "hi"},
                         {"role": "developer", "content": "b"}]}
    assert merge_chat(body, REPLACE)["messages"] == [
        {"role": "system", "content": "Rules."}, {"role": "user", "content": "hi"},
    ]


def test_responses_merge_into_instructions() -> None:
    body = {"input": [{"role": "developer", "content": "d"}, {"role": "user", "content": "hi"}], "instructions": "I."}
    assert merge_responses(body, P)["instructions"] == "Rules.\n\nI."
    assert merge_responses(body, APPEND)["instructions"] == "I.\n\nRules."
    assert merge_responses({"input": "hi"}, APPEND)["instructions"] == "Rules."
    replaced = merge_responses(body, REPLACE)
    assert replaced["instructions"] == "Rules." and replaced["input"] == [{"role": "user", "content": "hi"}]


def test_anthropic_merges_into_system_keeping_cache_marks() -> None:
    blocks = [{"type": "text", "text": "Mine.", "cache_control": {"type": "ephemeral"}}]
    assert merge_anthropic({"system": blocks}, P)["system"] == [{"type": "text", "text": "Rules."}, *blocks]
    assert merge_anthropic({"system": "Mine."}, APPEND)["system"] == "Mine.\n\nRules."
    assert merge_anthropic({"system": "Mine."}, REPLACE)["system"] == "Rules."
    assert merge_anthropic({}, P)["system"] == "Rules."


def test_the_section_compiles_to_a_policy() -> None:
    cfg, _ = parse(
        "global_prompts:\n  file: p.md\n  mode: append\n  models:\n    x: {mode: replace}\n    silent: {text: ''}\n"
        "  backends:\n    b: {text: B}\n"
    )
    assert global_prompts.policy(parse("backends: []\n")[0].global_prompts) is None
    global_prompts.fill(cfg.global_prompts, {"p.md": "From the file."})
    policy = global_prompts.policy(cfg.global_prompts)
    assert policy is not None
    assert policy.pick("y", "a") == Prompt("From the file.", "append", "default")
    assert policy.pick("x", "a") == Prompt("From the file.", "replace", "model x")
    assert policy.pick("silent", "a") is None
    assert policy.pick("silent", "b") == Prompt("B", "append", "backend b")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("global_prompts: {text: a, file: b.md}\n", "global_prompts: Value error, text and file"),
        ("global_prompts: {mode: before}\n", "global_prompts.mode"),
        ("global_prompts: {models: {x: {txt: a}}}\n", "global_prompts.models.x.txt: unknown key"),
        ("_prompt_files: {a.md: text}\n", "_prompt_files: unknown key"),
    ],
)
def test_section_errors_name_the_key(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert needle in str(info.value)


def test_prompt_files_are_read_relative_to_the_yaml_and_bounded(tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    (tmp_path / "p.md").write_text("Line one.\r\nLine two.\n\n")
    cfg, _ = parse("global_prompts:\n  file: p.md\n  backends:\n    b: {file: p.md}\n")
    assert global_prompts.read_files(config, cfg.global_prompts) == {"p.md": "Line one.\nLine two."}
    (tmp_path / "p.md").write_bytes(b"x" * (global_prompts.MAX_PROMPT_BYTES + 1))
    with pytest.raises(ConfigError, match=r"global_prompts.file: .*p.md is larger than 1048576 bytes"):
        global_prompts.read_files(config, cfg.global_prompts)
    (tmp_path / "p.md").write_bytes(b"x" * global_prompts.MAX_PROMPT_BYTES)  # at the limit: read
    assert len(global_prompts.read_files(config, cfg.global_prompts)["p.md"]) == global_prompts.MAX_PROMPT_BYTES
    (tmp_path / "p.md").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        global_prompts.read_files(config, cfg.global_prompts)
    (tmp_path / "p.md").unlink()
    with pytest.raises(ConfigError, match=r"global_prompts\.file: cannot read"):
        global_prompts.read_files(config, cfg.global_prompts)
