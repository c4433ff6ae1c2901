"""`manage.py listapikeys [--all]`: masked listing, never a hash or a key."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from keys.selectors import key_list


class Command(BaseCommand):
    help = "List API keys (masked hints only)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--all", action="store_true", help="include revoked keys")

    def handle(self, *args, **opts) -> None:
        rows = list(key_list(include_revoked=opts["all"]))
        if not rows:
            self.stdout.write("No API keys.")
            return
        header = (
            "NAME",
            "OWNER",
            "SOURCE",
            "HINT",
            "MODELS",
            "RPM",
            "EXPIRES",
            "STATE",
        )
        table = [header]
        for k in rows:
            table.append(
                (
                    k.name,
                    k.owner or "-",
                    k.source,
                    k.display_hint or "-",
                    ",".join(k.allowed_models) or "all",
                    str(k.rate_limit or "-"),
                    k.expires_at.isoformat() if k.expires_at else "never",
                    "revoked" if k.revoked_at else "active",
                )
            )
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )
