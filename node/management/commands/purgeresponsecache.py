"""`manage.py purgeresponsecache [--model NAME]`: empty the response cache.

Deletes the shared (Redis) entries of the deployment — every one, or those
of one model (the model name requests are routed to) — and tells every web
process of the deployment to drop the same from its memory tier
(docs/response-cache.md).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisError

from router.respcache import shared


class Command(BaseCommand):
    help = "Purge the response cache: every entry, or one model's (--model), in Redis and in every web process."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--model", help="purge only this model's entries (the name requests are routed to)")

    def handle(self, *args, **opts) -> None:
        model = opts["model"]
        if model is not None and not model.strip():
            raise CommandError("--model needs a model name")
        try:
            deleted = shared.purge(model)
        except RedisError as exc:
            raise CommandError(f"Redis is unavailable ({exc}); nothing was purged. Check REDIS_URL and retry.") from exc
        what = f"model {model!r}" if model is not None else "every model"
        self.stdout.write(f"Purged {deleted} shared response cache entries of {what}; web processes drop theirs.")
