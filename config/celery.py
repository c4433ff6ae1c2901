"""The Celery app: worker + embedded beat own all background work of a node."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("router")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    # The task probes only the backends whose `health.interval` has elapsed.
    "router-probe-backends": {"task": "router.probe_backends", "schedule": 2.0, "options": {"expires": 5}},
}
