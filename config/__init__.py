"""The project package.

The Celery app lives in `config.celery`; ``celery -A config`` finds it there
(Celery looks for ``config.celery`` when the package has no ``app``). It is
not imported here: a web process never sends a task, and Celery's import was
~0.3 s of each web process's start (issue 13, cold start).
"""
