"""Beat work of stored responses (config/celery.py schedules it)."""

from __future__ import annotations

import logging

from celery import shared_task

from . import services

log = logging.getLogger(__name__)


@shared_task(name="responsestore.prune", ignore_result=True)
def prune() -> int:
    """Delete the stored responses past ROUTER_RESPONSES_RETENTION_DAYS.
    Idempotent: a second run finds nothing more to delete."""
    deleted = services.responses_prune()
    if deleted:
        log.info("stored responses: pruned %d past their retention", deleted)
    return deleted
