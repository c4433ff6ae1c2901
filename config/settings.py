"""Settings, read from the environment once at start.

Everything an operator sets lives in the environment (process wiring) or in the
router YAML (routing); see docs/configuration.md. No routing state lives here.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
from pathlib import Path

import dj_database_url

from config import namespace

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("ROUTER_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """DJANGO_SECRET_KEY, else one generated once into var/ (never printed)."""
    key = os.environ.get("DJANGO_SECRET_KEY")
    if key:
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        # Whole or not at all: processes starting together on a fresh var dir
        # (a node's children, parallel test workers) must never read a file
        # another one has created but not yet written. The first link wins.
        fd, tmp = tempfile.mkstemp(dir=VAR_DIR, prefix=".secret_key.")
        try:
            os.write(fd, secrets.token_urlsafe(50).encode())
            os.close(fd)
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("DJANGO_DEBUG", "").lower() in {"1", "true", "yes"}
ALLOWED_HOSTS = ["*"]  # Host routing is the router's own job (legacy ingress).

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Before "channels": its `runworker appproxy` override must win.
    "appproxy",
    "channels",
    "router",
    "node",
    "keys",
    "adminapi",
    "dashboard",
    "filestore",
    "responsestore",
]
# daphne's app only gives `manage.py runserver` its ASGI server; importing it
# installs Twisted's reactor, ~0.2 s of every process's start (uvicorn, the
# tasks process, beat). `daphne config.asgi:application` needs no app.
if sys.argv[1:2] == ["runserver"]:
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several processes (web, tasks, events) share one SQLite file.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE",
         "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS: list[dict] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
LOGIN_URL = "/admin/login/"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# The router's own process settings (routing itself lives in the YAML).
ROUTER_CONFIG = os.environ.get("ROUTER_CONFIG", "")
ROUTER_CONFIG_VERSIONS = int(os.environ.get("ROUTER_CONFIG_VERSIONS", "100"))  # applied YAML texts kept
ROUTER_MAX_BODY_BYTES = int(os.environ.get("ROUTER_MAX_BODY_BYTES", str(32 * 1024 * 1024)))
# /v1 bodies are capped by the YAML's server.max_body_bytes in config/lean.py
# (before they are read); this is Django's own ceiling for every other path.
DATA_UPLOAD_MAX_MEMORY_SIZE = ROUTER_MAX_BODY_BYTES + 1024
# The Files API (/v1/files, docs/files.md): where uploads are kept (any Django
# storage backend, by dotted path and JSON options), and their limits.
ROUTER_FILES_MAX_BYTES = int(os.environ.get("ROUTER_FILES_MAX_BYTES", str(512 * 1024 * 1024)))
ROUTER_FILES_MAX_BYTES_PER_KEY = int(os.environ.get("ROUTER_FILES_MAX_BYTES_PER_KEY", str(10 * 1024**3)))
ROUTER_FILES_BODY_TIMEOUT = int(os.environ.get("ROUTER_FILES_BODY_TIMEOUT", "600"))
# Where request bodies wait on disk, as anonymous files gone when closed: the
# surface's forms past 1 MiB (an audio file to transcribe, an image to edit)
# while they are served (router/spool.py; their total is
# ROUTER_MAX_SPOOLED_BYTES, config/server.py), and /v1/files uploads' raw
# bodies while they arrive. Made on first use.
ROUTER_SPOOL_DIR = Path(os.environ.get("ROUTER_SPOOL_DIR", VAR_DIR / "spool"))
ROUTER_FILES_MAX_UPLOADS = int(os.environ.get("ROUTER_FILES_MAX_UPLOADS", "16"))  # at once, per web process
ROUTER_FILES_MAX_PER_KEY = int(os.environ.get("ROUTER_FILES_MAX_PER_KEY", "10000"))  # files one key holds
# Stored responses (/v1/responses with store, docs/responses.md): how long a
# stored response is kept (the beat's prune), the largest streamed answer
# assembled for storing, and how many answers may wait to be written per web
# process (past that an answer is not stored).
ROUTER_RESPONSES_RETENTION_DAYS = float(os.environ.get("ROUTER_RESPONSES_RETENTION_DAYS", "30"))
ROUTER_RESPONSES_MAX_BYTES = int(os.environ.get("ROUTER_RESPONSES_MAX_BYTES", str(16 * 1024 * 1024)))
ROUTER_RESPONSES_QUEUE_MAX = int(os.environ.get("ROUTER_RESPONSES_QUEUE_MAX", "1000"))
# The most stored responses one key keeps: the prune deletes its oldest past it.
ROUTER_RESPONSES_MAX_PER_KEY = int(os.environ.get("ROUTER_RESPONSES_MAX_PER_KEY", "100000"))
# Batches (/v1/batches, docs/files.md), run by the tasks process: lines in
# flight per batch and per tasks process, how long a runner's lease on its
# batch lasts unrenewed (a killed runner's batch resumes after it), and the
# most lines one input file may hold (OpenAI's).
ROUTER_BATCH_CONCURRENCY = int(os.environ.get("ROUTER_BATCH_CONCURRENCY", "4"))
ROUTER_BATCH_NODE_CONCURRENCY = int(os.environ.get("ROUTER_BATCH_NODE_CONCURRENCY", "16"))
ROUTER_BATCH_LEASE_SECONDS = float(os.environ.get("ROUTER_BATCH_LEASE_SECONDS", "30"))
ROUTER_BATCH_MAX_LINES = int(os.environ.get("ROUTER_BATCH_MAX_LINES", "50000"))
# Unfinished batches one key may have at once (429 `too_many_batches` past it).
ROUTER_BATCH_MAX_ACTIVE_PER_KEY = int(os.environ.get("ROUTER_BATCH_MAX_ACTIVE_PER_KEY", "100"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "router_files": {
        "BACKEND": os.environ.get("ROUTER_FILES_STORAGE", "django.core.files.storage.FileSystemStorage"),
        "OPTIONS": json.loads(os.environ.get("ROUTER_FILES_STORAGE_OPTIONS", "null"))
        or {"location": str(VAR_DIR / "files")},
    },
}
# Prefix of every Redis key/channel this node uses (change notices, health,
# recent observations, rate limits, the Celery queue). By default it is per
# deployment (one database = one deployment, config/namespace.py), so routers
# with distinct databases never share state on one Redis; explicit wins.
ROUTER_DEPLOYMENT_ID = namespace.deployment_id(DATABASES["default"])
ROUTER_NODE_ID = namespace.node_id(VAR_DIR)
ROUTER_REDIS_PREFIX = namespace.redis_prefix(os.environ, ROUTER_DEPLOYMENT_ID)
ROUTER_NOTICE_CHANNEL = ROUTER_REDIS_PREFIX + "notice"
# Tasks act on their own node (config, DB, registration): the queue is the
# namespace's own, so routers sharing one Redis never run each other's tasks.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("ROUTER_CELERY_QUEUE") or ROUTER_REDIS_PREFIX + "tasks"
# What `runnode` writes for the web processes to show (children, restarts).
ROUTER_NODE_STATE_FILE = VAR_DIR / "node-state.json"
ROUTER_POLL_SECONDS = float(os.environ.get("ROUTER_POLL_SECONDS", "2"))
# A web process refreshes its snapshot at most once per this many ms: the
# first change after a quiet spell applies at once, a burst in a few reloads.
ROUTER_RELOAD_GAP_MS = max(0.0, float(os.environ.get("ROUTER_RELOAD_GAP_MS", "25")))
# /status lists every backend up to this many; past it only those that are
# not healthy or have requests in flight (at 20,000 backends the full list
# was 6 MB built on the event loop, 15-150 ms, per read).
ROUTER_STATUS_BACKENDS = max(0, int(os.environ.get("ROUTER_STATUS_BACKENDS", "1000")))
# Watch the YAML file's mtime and apply edits without a restart: the tasks
# process looks every ROUTER_CONFIG_POLL_SECONDS (0: only the 1 s beat tick).
ROUTER_WATCH_CONFIG = os.environ.get("ROUTER_WATCH_CONFIG", "1") not in {"0", "false", "no"}
ROUTER_CONFIG_POLL_SECONDS = float(os.environ.get("ROUTER_CONFIG_POLL_SECONDS", "0.01"))

LOG_LEVEL = os.environ.get("ROUTER_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "router.logging.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "django.request": {"level": "ERROR"},  # 4xx are answered and observed, not logged
    },
}

# Server-side message storage: a freshly created API key's plaintext is shown
# once through a message and must never travel in a cookie.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

# --- issue 12: operator surfaces -------------------------------------------
# /status (backends, models, health, weights, key mode, config errors) answers
# a staff session or `Authorization: Bearer <ROUTER_STATUS_TOKEN>`; empty =
# staff session only. /livez and /readyz stay public (docs/operations.md).
ROUTER_STATUS_TOKEN = os.environ.get("ROUTER_STATUS_TOKEN", "")
