"""docs/providers/responses-bridge.md says what the bridge does: its policy
table equals the code's, row for row (on a mismatch the assertion prints the
table to paste)."""

from __future__ import annotations

import re
from pathlib import Path

from router.providers.bridge import RESPONSES_POLICY

DOC = Path(__file__).resolve().parents[3] / "docs" / "providers" / "responses-bridge.md"


def section(heading: str) -> str:
    match = re.search(rf"^#+ {re.escape(heading)}\s*$(.*?)(?=^#+ |\Z)", DOC.read_text(), re.M | re.S)
    assert match, f"{DOC.name} has no '{heading}' section"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) >= 2, "no table found"
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]] for row in rows[2:]]


def render(table: dict[str, tuple[str, str]]) -> str:
    lines = ["| field | policy | what happens |", "|---|---|---|"]
    lines += [f"| `{name}` | {policy} | {note} |" for name, (policy, note) in table.items()]
    return "\n".join(lines)


def test_the_policy_table_matches_the_code() -> None:
    documented = [(f.strip("`"), policy, note) for f, policy, note in table_rows(section("Request policy"))]
    expected = [(f, policy, note) for f, (policy, note) in RESPONSES_POLICY.items()]
    assert documented == expected, f"{DOC.name} 'Request policy' should read:\n\n{render(RESPONSES_POLICY)}\n"
