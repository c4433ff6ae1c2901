"""`manage.py doctor [--json] [--no-probe]`: check this node's set-up (node/doctor.py).

Exit code 0 when no check failed, 1 otherwise. Django's own system checks are
not run first (`requires_system_checks = []`): an invalid YAML is one of the
things the doctor reports, not a reason to stop before it.
"""

from __future__ import annotations

import sys

import orjson
from django.core.management.base import BaseCommand

from node.doctor import Context, exit_code, run


class Command(BaseCommand):
    help = "Check the YAML, the database, Redis, the secrets, the node's web, the backends and (when enabled) the coordinator."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
        parser.add_argument("--no-probe", action="store_true", help="do not send a probe to the backends")

    def handle(self, *args, **options) -> None:
        results = run(Context(probe=not options["no_probe"]))
        code = exit_code(results)
        if options["json"]:
            body = {"ok": code == 0, "checks": [r.as_dict() for r in results]}
            self.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
        else:
            for result in results:
                self.stdout.write(result.line())
            failed = sum(r.status == "FAIL" for r in results)
            warned = sum(r.status == "WARN" for r in results)
            self.stdout.write(f"{len(results)} checks: {failed} failed, {warned} warnings")
        if code:
            sys.exit(code)
