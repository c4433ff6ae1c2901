"""`manage.py createapikey --name NAME [...]`: issue an operator key.

Prints a masked summary, then the plaintext key alone as the LAST line, so
`KEY=$(manage.py createapikey --name ci | tail -n 1)` works. Nothing else
printed is secret.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from keys.services import key_create

from ._common import parse_expiry, split_list, summary


class Command(BaseCommand):
    help = "Create an API key; the plaintext key is printed once, as the last line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--owner", default="")
        parser.add_argument("--models", default="", help="comma-separated; default all")
        parser.add_argument(
            "--rate-limit", type=int, default=None, help="requests/minute"
        )
        parser.add_argument(
            "--expires", default=None, help="ISO 8601 (UTC if no offset)"
        )
        parser.add_argument("--ips", default="", help="comma-separated IPs/CIDRs")

    def handle(self, *args, **opts) -> None:
        expires = parse_expiry(opts["expires"])
        if expires is not None and expires <= timezone.now():
            raise CommandError(f"--expires {opts['expires']!r} is in the past")
        if opts["rate_limit"] is not None and opts["rate_limit"] < 1:
            raise CommandError(
                "--rate-limit must be a whole number ≥ 1 (requests per minute)"
            )
        try:
            key, plaintext = key_create(
                name=opts["name"],
                owner=opts["owner"],
                allowed_models=split_list(opts["models"]),
                expires_at=expires,
                rate_limit=opts["rate_limit"],
                allowed_client_ips=split_list(opts["ips"]),
            )
        except (ValueError, TypeError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("Created API key")
        for line in summary(key):
            self.stdout.write(f"  {line}")
        self.stdout.write("Store the key now; it is not shown again:")
        self.stdout.write(plaintext)
