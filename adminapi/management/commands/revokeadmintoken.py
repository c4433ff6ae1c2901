"""`manage.py revokeadmintoken --name NAME | --id ID`: revoke an admin API token."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from adminapi.models import AdminToken
from adminapi.tokens import token_revoke


class Command(BaseCommand):
    help = "Revoke an admin API token, chosen by name or id."

    def add_arguments(self, parser) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--name")
        group.add_argument("--id", type=int)

    def handle(self, *args, **opts) -> None:
        qs = AdminToken.objects.filter(revoked_at__isnull=True)
        qs = qs.filter(name=opts["name"]) if opts["name"] is not None else qs.filter(pk=opts["id"])
        found = list(qs)
        if not found:
            raise CommandError("no active admin token matches")
        if len(found) > 1:
            raise CommandError(f"{len(found)} active tokens have this name; revoke one with --id")
        token_revoke(found[0])
        self.stdout.write(f"Revoked admin token {found[0].name} ({found[0].hint})")
