"""router.yaml_quick reads a one-line flow mapping item exactly as PyYAML's
safe loader does, or declines (None) and PyYAML reads it."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from router.yaml_quick import item

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Values YAML 1.1 reads as something other than the text, and texts near them.
TRICKY = [
    "yes", "No", "ON", "off", "true", "False", "null", "Null", "~", "y", "n", "=", "<<", "-", "--", "- a",
    "0", "-0", "+1", "010", "08", "0x1F", "0o7", "0b11", "1_000", "1:30", "190:20:30", "2002-12-14",
    "2001-12-14t21:59:43.10-05:00", ".5", "1.", "1.0", "-1.50", "1e3", "1.0e+3", ".inf", "-.Inf", ".nan",
    "a#b", "a #b", "a b", "a: b", "a:b", "a:", "http://x:80/v1", "http://[::1]:8000", "it's", "''", '"q"',
    "a\\b", "a,b", "a]b", "a}b", "a{b", "[a]", "{a: 1}", "%x", "@x", "`x", "!x", "&x", "*x", "|", ">", "?",
    "c00000-r0", "m00000", "openai_compat", "sk-${KEY}", "${VAR}", "é", "a\u00a0b", " lead", "trail ", "",
]
KEYS = ["name", "url", "models", "weight", "kind", "on", "yes", "Null", "_x", "k1", "a-b", "a b", "1", "served_model"]

text = st.one_of(st.sampled_from(TRICKY), st.text(alphabet="ab1:/.-_ #',\"[]{}yYnN0\\", max_size=8))


def plain(s: str) -> str:
    return s


def single(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def double(s: str) -> str:
    return '"' + s + '"'


render = st.sampled_from([plain, plain, single, double])


@st.composite
def values(draw) -> str:
    if draw(st.integers(0, 4)) == 0:
        parts = [draw(render)(draw(text)) for _ in range(draw(st.integers(0, 3)))]
        sep = draw(st.sampled_from([", ", ",", " , "]))
        return "[" + draw(st.sampled_from(["", " "])) + sep.join(parts) + "]"
    return draw(render)(draw(text))


@st.composite
def items(draw) -> str:
    pairs = [f"{draw(st.sampled_from(KEYS))}:{draw(st.sampled_from([' ', '  ', '']))}{draw(values())}"
             for _ in range(draw(st.integers(0, 5)))]
    body = draw(st.sampled_from([", ", ",", " ,  "])).join(pairs)
    tail = draw(st.sampled_from(["", " ", "  # note", "#x", "\n", "\n\n  # c\n", "\n  x: 1", ",", "\t"]))
    return draw(st.sampled_from(["", "  ", "    "])) + "-" + draw(st.sampled_from([" ", "  "])) + "{" + draw(st.sampled_from(["", " "])) + body + \
        draw(st.sampled_from(["", " "])) + "}" + tail


def typed(value: Any) -> Any:
    """A value with its types spelled out (1 == 1.0 == True in Python)."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, value)


def pyyaml(text: str) -> Any:
    try:
        parsed = yaml.load(text, Loader=LOADER)
    except yaml.YAMLError:
        return "error"
    return parsed[0] if isinstance(parsed, list) and len(parsed) == 1 else "not one item"


@settings(max_examples=3000, deadline=None)
@given(items())
@example("- {name: c00000-r0, url: 'http://127.0.0.1:50213', models: [m00000], weight: 101}")
@example("  - {name: c00000-r0, url: 'http://127.0.0.1:50213', models: [m00000], weight: 101}")
@example("- {name: a, url: http://x:80/v1, models: [m1, 'm 2', \"m3\"], weight: 1.5}  # c\n\n")
def test_what_it_reads_pyyaml_reads_the_same(text: str) -> None:
    quick = item(text)
    if quick is not None:
        assert typed(quick) == typed(pyyaml(text)), text


def test_the_generated_form_is_read_here():
    line = "  - {name: c00000-r0, url: 'http://127.0.0.1:50213', models: [m00000, alias-1], weight: 101}\n"
    assert item(line) == {"name": "c00000-r0", "url": "http://127.0.0.1:50213", "models": ["m00000", "alias-1"],
                          "weight": 101}
    assert item("- {name: b, url: http://h:8000/v1, capacity: 4, connect_timeout: 2.5, served_model: \"x\"}") == {
        "name": "b", "url": "http://h:8000/v1", "capacity": 4, "connect_timeout": 2.5, "served_model": "x"}


def test_what_it_declines():
    for text in (
        "- {name: b, enabled: yes}",  # a YAML 1.1 bool
        "- {name: b, on: 1}",  # a key YAML reads as True
        "- {name: b, name: c}",  # a key twice (PyYAML keeps the last)
        "- {name: b, weight: 010}",  # octal in YAML 1.1
        "- {name: b, url: \"a\\tb\"}",  # an escape
        "- {name: b, headers: {x: 1}}",  # nested
        "- name: b\n    url: http://h",  # block form
        "- {name: b}\n  x: 1",  # more content
        "- {name: b,}",  # a trailing comma
    ):
        assert item(text) is None, text
