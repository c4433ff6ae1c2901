"""`manage.py keyusage`: per-key usage (requests, errors, tokens, last use).

The same reads as the dashboard (keys/usage.py: DB rows + the Redis buffer),
so its totals equal the Keys page's. Never a hash or a key.
"""

from __future__ import annotations

import csv

from django.core.management.base import BaseCommand, CommandError

from keys import usage
from keys.management.commands._common import parse_expiry
from keys.models import ApiKey, KeyUsage
from keys.selectors import record_id


class Command(BaseCommand):
    help = "Per-key usage over the last --days N (default 1) or --since DATE, as a table or CSV."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--days", type=float, default=None, help="the last N×24 UTC hour buckets (default 1)")
        parser.add_argument("--since", help="from this UTC date/time on (ISO 8601, floored to its hour)")
        parser.add_argument("--key", help="one key: its name or record id (operator:<pk>, coordinator:<key_id>)")
        parser.add_argument(
            "--by",
            choices=("key", "day", "hour"),
            default="key",
            help="totals per key (default), or per key per UTC day / hour",
        )
        parser.add_argument("--csv", action="store_true", help="CSV (cells escaped against formula injection)")
        parser.add_argument(
            "--fold",
            action="store_true",
            help="first move the Redis buffer into the database (what the tasks process does every ~30 s)",
        )

    def _ref(self, value: str) -> str:
        refs = {record_id(k) for k in ApiKey.objects.filter(name=value).only("id", "source", "key_id")}
        if len(refs) > 1:
            raise CommandError(f"--key {value!r} names {len(refs)} keys; use a record id: {', '.join(sorted(refs))}")
        if refs:
            return refs.pop()
        if ":" in value or value == usage.buffer.OVERFLOW:
            return value
        names = set(KeyUsage.objects.filter(name=value).values_list("key_ref", flat=True))
        if len(names) == 1:
            return names.pop()
        raise CommandError(f"--key {value!r}: no key has this name or id")

    def handle(self, *args, **opts) -> None:
        if opts["days"] is not None and opts["since"]:
            raise CommandError("give --days or --since, not both")
        if opts["days"] is not None and opts["days"] <= 0:
            raise CommandError("--days must be > 0")
        if opts["fold"]:
            usage.fold()
        since = parse_expiry(opts["since"]) if opts["since"] else None
        start = usage.window_start(days=opts["days"] or 1, since=since)
        ref = self._ref(opts["key"]) if opts["key"] else None
        rows = usage.group(usage.hourly(start, ref), opts["by"])
        if opts["csv"]:
            writer = csv.writer(self.stdout)
            for line in usage.csv_rows(rows):
                writer.writerow(line)
            return
        if not rows:
            self.stdout.write(f"No key usage since {start:%Y-%m-%d %H}:00 UTC.")
            return
        head = ("HOUR" if opts["by"] == "hour" else "DAY",) if opts["by"] != "key" else ()
        header = (*head, "NAME", "REF", "SOURCE", "REQUESTS", "ERRORS", "PROMPT", "COMPLETION", "CACHE HITS", "LAST USE")
        table = [header]
        for r in rows:
            when = ()
            if opts["by"] != "key" and r.hour is not None:
                when = (f"{r.hour:%Y-%m-%d %H}:00" if opts["by"] == "hour" else f"{r.hour:%Y-%m-%d}",)
            table.append(
                (
                    *when,
                    r.name or "-",
                    r.key_ref,
                    r.source or "-",
                    str(r.requests),
                    str(r.errors),
                    str(r.prompt_tokens),
                    str(r.completion_tokens),
                    str(r.cache_hits),
                    f"{r.last_used_at:%Y-%m-%d %H:%M:%S}" if r.last_used_at else "never",
                )
            )
        table.append(
            (
                *(("",) if head else ()),
                "TOTAL",
                "",
                "",
                str(sum(r.requests for r in rows)),
                str(sum(r.errors for r in rows)),
                str(sum(r.prompt_tokens for r in rows)),
                str(sum(r.completion_tokens for r in rows)),
                str(sum(r.cache_hits for r in rows)),
                "",
            )
        )
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        self.stdout.write(f"Key usage since {start:%Y-%m-%d %H}:00 UTC (DB + Redis buffer)")
        for row in table:
            self.stdout.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
