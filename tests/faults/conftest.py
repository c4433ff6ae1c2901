"""The fault suite (`make faults`): real stacks, real faults, one table at the end.

Every test here is marked `faults` and left out of `make test` (pytest.ini
deselects the marker); `make faults` runs them and prints, after the run, one
row per fault: requests sent, ok, failed (a clear error the client can act
on), lost (no usable answer at all) and the verdict.
"""

from __future__ import annotations

import pytest

from tests.faults.load import Counts

ROWS: list[tuple[str, Counts, str, str]] = []


@pytest.fixture
def report():
    """report(fault, counts, verdict_ok, note): one row of the table."""

    def add(fault: str, counts: Counts, ok: bool, note: str = "") -> None:
        ROWS.append((fault, counts, "PASS" if ok else "FAIL", note))

    return add


def pytest_terminal_summary(terminalreporter):
    if not ROWS:
        return
    tr = terminalreporter
    tr.write_sep("=", "fault suite")
    head = f"{'fault':<44} {'sent':>7} {'ok':>7} {'failed':>7} {'lost':>5}  verdict  note"
    tr.write_line(head)
    tr.write_line("-" * len(head))
    for fault, c, verdict, note in ROWS:
        tr.write_line(f"{fault:<44} {c.sent:>7} {c.ok:>7} {c.failed:>7} {c.lost:>5}  {verdict:<7}  {note}")
