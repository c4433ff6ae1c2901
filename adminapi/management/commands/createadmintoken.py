"""`manage.py createadmintoken --name NAME [--read-only]`: issue an admin API token.

The plaintext is printed once, as the LAST line, so
`TOKEN=$(manage.py createadmintoken --name ci | tail -n 1)` works.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from adminapi.tokens import token_create


class Command(BaseCommand):
    help = "Create an admin API token; the plaintext is printed once, as the last line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--read-only", action="store_true", help="may read (GET) but change nothing")

    def handle(self, *args, **opts) -> None:
        try:
            token, plaintext = token_create(name=opts["name"], read_only=opts["read_only"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Created admin token {token.name} ({token.hint}){' read-only' if token.read_only else ''}")
        self.stdout.write("Store the token now; it is not shown again:")
        self.stdout.write(plaintext)
