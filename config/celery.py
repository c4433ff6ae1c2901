"""The Celery app: worker + embedded beat own all background work of a node."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("router")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The tasks process is the one writer of the YAML (router/config_watch.py).
app.conf.imports = ("router.config_watch",)

# Tasks act on their own node (its config, DB and registration), so nodes that
# share one Redis (distinct ROUTER_REDIS_PREFIX) must not share a task queue.
app.conf.task_default_queue = os.environ.get("ROUTER_REDIS_PREFIX", "router:") + "tasks"

app.conf.beat_schedule = {
    # Apply the YAML file when it changed (digest-checked; a no-op otherwise).
    "router-sync-config": {"task": "router.sync_config", "schedule": 1.0, "options": {"expires": 1.0}},
    # The task probes only the backends whose `health.interval` has elapsed.
    "router-probe-backends": {"task": "router.probe_backends", "schedule": 2.0, "options": {"expires": 5}},
    # AppProxy worker: decides each second what is due (register, heartbeat
    # every heartbeat_period, pull every reconcile_interval; appproxy/tasks.py).
    "appproxy-tick": {"task": "appproxy.tick", "schedule": 1.0, "options": {"expires": 1.0}},
}
