"""docs/anthropic.md says what the code does: ignored fields and the error table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from router.frontends.anthropic import ERROR_TYPES, IGNORED_FIELDS, STOP_REASONS

DOC = (Path(__file__).resolve().parents[3] / "docs" / "anthropic.md").read_text()


@pytest.mark.parametrize("field", sorted(IGNORED_FIELDS))
def test_every_ignored_field_is_documented(field):
    assert f"`{field}`" in DOC


@pytest.mark.parametrize("status", sorted(ERROR_TYPES))
def test_every_error_type_is_in_the_error_table(status):
    if status == 402:  # backends only; the router never answers 402
        return
    rows = [line for line in DOC.splitlines() if line.startswith("|") and f"`{ERROR_TYPES[status]}`" in line]
    assert any(re.search(rf"\b{status}\b", row) for row in rows), (status, ERROR_TYPES[status])


@pytest.mark.parametrize("finish", sorted(STOP_REASONS))
def test_every_stop_reason_is_documented(finish):
    if finish == "function_call":  # deprecated alias of tool_calls
        return
    assert f"`{finish}`" in DOC and f"`{STOP_REASONS[finish]}`" in DOC
