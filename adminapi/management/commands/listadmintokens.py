"""`manage.py listadmintokens [--all]`: masked listing, never a hash or a token."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from adminapi.tokens import token_list


class Command(BaseCommand):
    help = "List admin API tokens (masked hints only)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--all", action="store_true", help="include revoked tokens")

    def handle(self, *args, **opts) -> None:
        rows = list(token_list(include_revoked=opts["all"]))
        if not rows:
            self.stdout.write("No admin tokens.")
            return
        table = [("ID", "NAME", "HINT", "ACCESS", "LAST USE", "STATE")]
        for t in rows:
            table.append((
                str(t.pk), t.name, t.hint, "read-only" if t.read_only else "read-write",
                f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never",
                "revoked" if t.revoked_at else "active",
            ))  # fmt: skip
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            self.stdout.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
