"""`manage.py revokeapikey --name NAME | --hint HINT`: revoke an operator key."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from keys.models import ApiKey, KeySource
from keys.services import key_revoke


class Command(BaseCommand):
    help = "Revoke an operator API key, chosen by name or by its masked hint."

    def add_arguments(self, parser) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--name")
        group.add_argument("--hint", help="e.g. 'sk-…a1b2' or just 'a1b2'")

    def handle(self, *args, **opts) -> None:
        qs = ApiKey.objects.filter(source=KeySource.OPERATOR, revoked_at__isnull=True)
        if opts["name"] is not None:
            what = f"name {opts['name']!r}"
            qs = qs.filter(name=opts["name"])
        else:
            hint = opts["hint"].strip()
            what = f"hint {hint!r}"
            tail = hint.rsplit("…", 1)[-1].rsplit("...", 1)[-1]
            if len(tail) < 4:
                raise CommandError("--hint needs the last four characters of the key")
            qs = qs.filter(hint__endswith=tail)
        keys = list(qs)
        if not keys:
            raise CommandError(f"no active operator key with {what}")
        if len(keys) > 1:
            hints = ", ".join(k.hint for k in keys)
            raise CommandError(
                f"{len(keys)} active keys match {what} ({hints}); revoke one with --hint"
            )
        key = key_revoke(keys[0])
        self.stdout.write(f"Revoked API key {key.name} ({key.hint})")
