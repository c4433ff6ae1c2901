"""The Celery app: worker + embedded beat own all background work of a node."""

import os

from celery import Celery
from celery.signals import beat_init, celeryd_after_setup, worker_ready

from node import beat
from router import gcwork

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("router")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The tasks process is the one writer of the YAML (node/config_watch.py).
app.conf.imports = ("node.config_watch",)

# The task queue is CELERY_TASK_DEFAULT_QUEUE of config/settings.py: the
# node's Redis namespace + "tasks", so routers on one Redis never share it.

# One warning per broker outage instead of a stack trace per due task.
app.conf.beat_scheduler = "node.beat:QuietScheduler"
app.conf.beat_schedule = {
    # Apply the YAML file when it changed (digest-checked; a no-op otherwise).
    "router-sync-config": {"task": "router.sync_config", "schedule": 1.0, "options": {"expires": 1.0}},
    # The task probes only the backends whose `health.interval` has elapsed.
    "router-probe-backends": {"task": "router.probe_backends", "schedule": 2.0, "options": {"expires": 5}},
    # AppProxy worker: decides each second what is due (register, heartbeat
    # every heartbeat_period, pull every reconcile_interval; appproxy/tasks.py).
    "appproxy-tick": {"task": "appproxy.tick", "schedule": 1.0, "options": {"expires": 1.0}},
    # Batches: start a runner for each unfinished batch no process holds (filestore/tasks.py).
    "filestore-sweep-batches": {"task": "filestore.sweep_batches", "schedule": 2.0, "options": {"expires": 2.0}},
    # Per-key usage: the Redis buffer of the drainers → KeyUsage (keys/tasks.py).
    "keys-fold-usage": {"task": "keys.fold_usage", "schedule": 30.0, "options": {"expires": 30}},
    # Stored responses past ROUTER_RESPONSES_RETENTION_DAYS (responsestore/tasks.py).
    "responsestore-prune": {"task": "responsestore.prune", "schedule": 600.0, "options": {"expires": 600}},
}


@beat_init.connect
def _one_beat_per_node(sender=None, **kwargs) -> None:
    """Before beat schedules anything: wait for the node's beat lock."""
    beat.hold()


@celeryd_after_setup.connect
def _own_queue(sender=None, instance=None, **kwargs) -> None:
    """Each worker also consumes a queue of its own (`appproxy.tasks.own_queue`):
    the AppProxy jobs a worker's tick decides for its own node (register,
    heartbeat, pull) go there. Nodes that share a database share the task
    queue; on it another node's worker would take the job and find nothing
    due for *its* node, and this node could wait indefinitely to register."""
    from appproxy.tasks import own_queue

    if sender and instance is not None:
        instance.app.amqp.queues.select_add(own_queue(str(sender)))


@worker_ready.connect
def _settle_gc(**_kwargs) -> None:
    """What the worker set up lives as long as it: out of the collector's
    reach, so a collection during a task walks only what the task made."""
    gcwork.settle()
