"""The batches' Celery task: every 2 s (config/celery.py), a runner for each
unfinished batch on this process's batch loop. Idempotent: a batch run here
or elsewhere (its lease, filestore.batches.run) is left alone."""

from __future__ import annotations

from celery import shared_task

from .batches import loop, run, store


@shared_task(name="filestore.sweep_batches", ignore_result=True, expires=2)
def sweep_batches() -> int:
    ids = store.unfinished()
    for batch_id in ids:
        loop.submit(run.start, batch_id)
    return len(ids)
