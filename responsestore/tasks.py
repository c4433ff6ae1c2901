"""Beat work of stored responses (config/celery.py schedules it)."""

from __future__ import annotations

import logging

from celery import shared_task

from . import services

log = logging.getLogger(__name__)


@shared_task(name="responsestore.prune", ignore_result=True)
def prune() -> int:
    """Delete the stored responses past ROUTER_RESPONSES_RETENTION_DAYS, and
    each key's oldest past ROUTER_RESPONSES_MAX_PER_KEY. Idempotent: a second
    run finds nothing more to delete."""
    deleted = services.responses_prune()
    if deleted:
        log.info("stored responses: pruned %d past their retention", deleted)
    capped = services.responses_cap()
    if capped:
        log.info("stored responses: pruned %d past ROUTER_RESPONSES_MAX_PER_KEY", capped)
    return deleted + capped
