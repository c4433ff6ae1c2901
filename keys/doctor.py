"""The API-key part of `manage.py doctor` (registered in apps.py): in
blocking mode, is there a key any request could pass with?"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Q
from django.utils import timezone

from node.doctor import Context, Result, ok, warn

from .models import ApiKey

__all__ = ["check"]


def check(ctx: Context) -> Iterator[Result]:
    doc = ctx.document
    if doc is None:
        return  # the config checks said why
    # The ROUTER worker forces blocking mode with the coordinator's keys (docs/router-mode.md).
    router_mode = (doc.appproxy_router or {}).get("enabled") is True
    if doc.api_keys.mode != "blocking" and not router_mode:
        yield ok("keys", "open mode: /v1 checks no key")
        return
    if not ctx.db_ready:
        yield warn("keys", "not checked: the database is not ready", "fix the database (above)")
        return
    usable = ApiKey.objects.filter(revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )
    count = usable.count()
    if count == 0:
        fix = (
            "publish keys from the coordinator (docs/router-mode.md)"
            if router_mode
            else "create one: manage.py createapikey --name NAME"
        )
        yield warn("keys", "blocking mode and no usable key: every /v1 request is refused", fix)
        return
    yield ok("keys", f"blocking mode, {count} usable key(s)")
