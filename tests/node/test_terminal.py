"""What `runnode` (`make run`) shows on its terminal: one block once the node
has started, naming every address, the login and where the logs are; none of
the children's banners (they are in <var>/log/); a start failure's error."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from django.core.management.base import CommandError
from django.test import override_settings

from node.management.commands.runnode import child_log_bytes, config_moved
from router.services import DEMO_CONFIG
from tests.support.nodeproc import NodeProc
from tests.support.routerproc import PY, ROOT, wait_until

BANNERS = ("celery beat v", "[queues]", "SecurityWarning", "superuser privileges", "transport:")


def _spawn(node: NodeProc, *args: str) -> tuple[Path, Path]:
    """runnode with its stdout and its stderr in two files (the terminal)."""
    out, err = node.dir / "terminal.out", node.dir / "terminal.err"
    node.proc = subprocess.Popen([PY, "manage.py", "runnode", "--port", str(node.port), *args], cwd=ROOT,
                                 env=node.env, stdout=out.open("ab"), stderr=err.open("ab"), start_new_session=True)
    node.log_path = out
    return out, err


def test_the_terminal_shows_one_ready_block_and_none_of_the_childrens_banners(node_factory):
    node = node_factory()
    out, err = _spawn(node)
    wait_until(lambda: "Ctrl-C stops everything" in out.read_text(), 90, interval=0.2,
               what=f"the ready block (stderr: {err})")
    assert node.readyz().status_code == 200
    logs = node.dir / "log"
    # The banners are in the children's files (Celery's printed as each starts).
    wait_until(lambda: "celery beat v" in (logs / "beat.log").read_text(), 30, what="beat's banner in its log")
    wait_until(lambda: "[queues]" in (logs / "tasks.log").read_text(), 30, what="the worker's banner in its log")
    stdout, stderr = out.read_text(), err.read_text()

    block = stdout[stdout.index("router: ready"):]
    base = f"http://127.0.0.1:{node.port}"
    for address in ("/v1", "/dashboard/", "/admin/", "/metrics", "/livez", "/readyz", "/status"):
        assert f"{base}{address}" in block, address
    password_file = node.dir / "admin-password"
    assert f"admin  (created now; its password is in {password_file})" in block
    assert str(node.dir / "router.yaml") in block
    assert f"{logs}/  (web.log, tasks.log, beat.log)" in block
    assert block.rstrip().endswith("router: Ctrl-C stops everything")
    assert stdout.count("router: ready") == 1

    terminal = stdout + stderr
    for banner in BANNERS:
        assert banner not in terminal, banner
    assert password_file.read_text().strip() not in terminal + "".join(p.read_text() for p in logs.iterdir())


def test_a_child_that_cannot_start_still_prints_its_error_on_the_terminal(node_factory):
    """The web process fails at import (a bad ROUTER_SWITCH_INTERVAL_MS): runnode
    exits non-zero and its terminal has the error from the web's log."""
    node = node_factory(env={"ROUTER_SWITCH_INTERVAL_MS": "not-a-number"})
    out, err = _spawn(node)
    assert node.proc.wait(90) == 1
    stderr = err.read_text()
    assert "node not started: web exited with 1 while starting" in stderr
    assert f"the end of its log ({node.dir / 'log' / 'web.log'})" in stderr
    assert "could not convert string to float: 'not-a-number'" in stderr
    assert "router: ready" not in out.read_text()


def test_a_warning_a_child_logs_reaches_the_terminal_once(node_factory):
    """A refused config edit: the tasks process and the web both log it; the
    terminal says it once, with the key path."""
    node = node_factory()
    out, err = _spawn(node)
    wait_until(lambda: "Ctrl-C stops everything" in out.read_text(), 90, interval=0.2, what="the ready block")
    (node.dir / "router.yaml").write_text(
        "backends:\n  - name: b1\n    url: http://127.0.0.1:9\n    models: [m]\n    wieght: 3\n"
    )
    wait_until(lambda: "wieght" in (node.status().get("last_error") or ""), 30, interval=0.2,
               what="the web to report the refusal")
    wait_until(lambda: "backends[0].wieght: unknown key" in err.read_text(), 10, interval=0.2,
               what="the refusal on the terminal")
    time.sleep(1.5)  # two reads of the logs: the web's line, said already, is not said again
    said = [line for line in err.read_text().splitlines() if "wieght" in line]
    assert len(said) == 1 and "error: config file not applied" in said[0] and said[0].startswith("router: "), said


def test_a_config_file_created_beside_the_demo_is_the_one_in_use(tmp_path):
    """runnode says when the config in use changes: ./router.yaml created
    (the demo's README step), then removed again."""
    with override_settings(ROUTER_CONFIG="", BASE_DIR=tmp_path):
        assert config_moved(DEMO_CONFIG) is None
        (tmp_path / "router.yaml").write_text("backends: []\n")
        assert config_moved(DEMO_CONFIG) == tmp_path / "router.yaml"
        assert config_moved(tmp_path / "router.yaml") is None
        (tmp_path / "router.yaml").unlink()
        assert config_moved(tmp_path / "router.yaml") == DEMO_CONFIG


def test_with_inherit_the_childrens_output_stays_on_runnodes_own(node_factory):
    """`--child-output inherit` (the container's entry point): the children
    write to runnode's stdout and stderr, the container's log; no files."""
    node = node_factory()
    out, err = _spawn(node, "--child-output", "inherit")
    wait_until(lambda: "Ctrl-C stops everything" in out.read_text(), 90, interval=0.2, what="the ready block")
    wait_until(lambda: "celery beat v" in out.read_text() + err.read_text(), 30, what="beat's banner")
    assert "logs             this terminal (--child-output inherit)" in out.read_text()
    assert not (node.dir / "log").exists()


@pytest.mark.parametrize("raw", ["0", "-5", "64MB"])
def test_a_bad_child_log_limit_fails_naming_the_variable(raw):
    with pytest.raises(CommandError, match=f"ROUTER_CHILD_LOG_BYTES must be .* got {raw!r}"):
        child_log_bytes({"ROUTER_CHILD_LOG_BYTES": raw})
    assert child_log_bytes({}) == 64 << 20 and child_log_bytes({"ROUTER_CHILD_LOG_BYTES": "4096"}) == 4096
