"""docs/mixed-providers.md says what the code does (seed 002 S10).

The classifier table, the path selectors, the extensions and the three field
policy tables are compared with the code row for row, so neither can change
without the other. On a policy mismatch the assertion prints the table to paste.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from router.providers import KINDS, provider_for
from router.providers.ollama.common import EXTENSION_OPTIONS
from router.providers.ollama.policy import CHAT_POLICY, EMBED_POLICY, RESPONSES_POLICY
from router.request import _PATH_SELECTORS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "mixed-providers.md"


def section(heading: str) -> str:
    """The text under a markdown heading, up to the next heading of any level."""
    text = DOC.read_text()
    match = re.search(rf"^#+ {re.escape(heading)}\s*$(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"docs/mixed-providers.md has no '{heading}' section"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """Body rows of the first markdown table in `text`, cells stripped."""
    rows = []
    started = False
    for line in text.splitlines():
        if not line.startswith("|"):
            if started:
                break
            continue
        started = True
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.append([c.replace("\\|", "|") for c in cells])
    assert len(rows) >= 2, "no table found"
    return rows[2:]  # drop the header and the --- line


def render(table: dict[str, tuple[str, str]]) -> str:
    lines = ["| field | policy | what happens |", "|---|---|---|"]
    for name, (policy, note) in table.items():
        lines.append(f"| `{name}` | {policy} | {note.replace('|', chr(92) + '|')} |")
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("heading", "table"),
    [
        ("Chat Completions policy", CHAT_POLICY),
        ("Responses policy", RESPONSES_POLICY),
        ("Embeddings policy", EMBED_POLICY),
    ],
)
def test_policy_tables_match_the_code(heading, table):
    documented = [(f.strip("`"), policy, note) for f, policy, note in table_rows(section(heading))]
    expected = [(f, policy, note) for f, (policy, note) in table.items()]
    assert documented == expected, f"docs/mixed-providers.md '{heading}' should read:\n\n{render(table)}\n"


def test_classifier_table_matches_the_code():
    rows = table_rows(section("The classifier: kind → path"))
    documented = {re.match(r"`([^`]+)`", kind).group(1): path for kind, path, _ in rows}
    assert documented == {kind: provider_for(kind).path for kind in KINDS}


def test_path_selectors_are_all_documented():
    text = " ".join(section("No client path selector").split())
    for name in _PATH_SELECTORS:
        assert f"`metadata.{name}`" in text
    assert "the same four names at the top level" in text and len(_PATH_SELECTORS) == 4


def test_extensions_are_documented():
    text = " ".join(section("Normalized path").split())
    for name, target in EXTENSION_OPTIONS.items():
        assert f"`{name}` → `options.{target}`" in text
    assert "`think`" in text


def test_scenario_map_names_tests_that_exist():
    rows = table_rows(section("Acceptance scenarios → tests"))
    assert [r[0] for r in rows] == [f"S{i:02d}" for i in range(1, 11)]
    current = None
    for _, _, tests in rows:
        for ref in re.findall(r"`([^`]+)`", tests):
            path, _, name = ref.partition("::")
            if path:
                current = ROOT / path
                assert current.exists(), ref
            if not name:
                continue
            assert current is not None and current.is_file(), ref
            source = current.read_text()
            pattern = re.escape(name).replace(r"\*", r"\w*")
            assert re.search(rf"^def {pattern}\(", source, re.M), f"{ref}: no such test"
