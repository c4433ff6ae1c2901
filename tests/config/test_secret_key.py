"""The generated secret key: processes starting together on a fresh var dir
(a node's children, parallel test workers) all read the same whole key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READ = "from django.conf import settings; print(settings.SECRET_KEY)"


def test_processes_starting_together_read_one_whole_key(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "ROUTER_VAR_DIR": str(tmp_path)}
    env.pop("DJANGO_SECRET_KEY", None)
    procs = [subprocess.Popen([sys.executable, "-c", READ], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-500:] for _, err in outs]
    stored = tmp_path / "secret_key"
    assert {out.strip() for out, _ in outs} == {stored.read_text().strip()}
    assert len(stored.read_text().strip()) >= 50
    assert stored.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name != "secret_key"] == []  # no temporary file left
