"""`manage.py routerbackend add|remove|list`: operator backends (source `admin`).

Only `admin` rows are touched; `config` rows belong to the YAML and
`appproxy` rows to the reconcile. `list` shows every backend, whatever its
source: a header row, then one aligned row each. Every change reaches all web processes
within a second (revision bump + change notice).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from router.core.backend import masked_url
from router.models import Backend, Source
from router.providers import KINDS
from router.revision import BACKEND, bump_revision, touch

LIST_HEADER = ("NAME", "SOURCE", "KIND", "URL", "MODELS", "WEIGHT")


class Command(BaseCommand):
    help = "Add, remove or list operator-managed backends (source=admin)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add")
        add.add_argument("--name", required=True)
        add.add_argument("--url", required=True)
        add.add_argument("--models", required=True, help="comma-separated client-facing names")
        add.add_argument("--kind", default="openai_compat", choices=sorted(KINDS))
        add.add_argument("--served-model", default="")
        add.add_argument("--weight", type=int, default=100)
        add.add_argument("--capacity", type=int)
        add.add_argument("--priority", type=int, default=0)
        add.add_argument("--api-key", default="", help="a literal or a ${ENV_VAR} reference")
        rm = sub.add_parser("remove")
        rm.add_argument("--name", required=True)
        sub.add_parser("list")

    def handle(self, *args, **opts):
        action = opts["action"]
        if action == "list":
            self._list()
            return
        with transaction.atomic():
            existing = Backend.objects.filter(name=opts["name"]).first()
            if existing is not None and existing.source != Source.ADMIN:
                raise CommandError(f"backend {opts['name']!r} belongs to source {existing.source!r}; not touching it")
            if action == "remove":
                if existing is None:
                    raise CommandError(f"no admin backend named {opts['name']!r}")
                existing.delete()
            else:
                if not 1 <= opts["weight"] <= 1000:
                    raise CommandError("--weight must be between 1 and 1000")
                models = [m.strip() for m in opts["models"].split(",") if m.strip()]
                if not models:
                    raise CommandError("--models needs at least one name")
                Backend.objects.update_or_create(
                    name=opts["name"],
                    defaults=dict(
                        source=Source.ADMIN, url=opts["url"].rstrip("/"), kind=opts["kind"], models=models,
                        served_model=opts["served_model"], weight=opts["weight"], capacity=opts["capacity"],
                        priority=opts["priority"], api_key=opts["api_key"],
                    ),
                )
            touch(BACKEND, opts["name"])
            revision = bump_revision(f"admin backend {action} {opts['name']}")
        self.stdout.write(f"{action} {opts['name']}: revision {revision}")

    def _list(self) -> None:
        """A header row, then one row per backend, columns aligned (as listapikeys)."""
        table = [LIST_HEADER]
        for b in Backend.objects.all():
            table.append((b.name, b.source, b.kind, masked_url(b.url), ",".join(b.models), str(b.weight)))
        if len(table) == 1:
            self.stdout.write("No backends.")
            return
        widths = [max(len(row[i]) for row in table) for i in range(len(LIST_HEADER))]
        for row in table:
            self.stdout.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
