#!/usr/bin/env bash
# Sets the project up on first use, idempotently: virtualenv, pinned
# dependencies, a local Redis if none answers at REDIS_URL, DB migrations;
# in dev mode also Debian's chromium for the browser tests (tests/browser).
#   scripts/bootstrap.sh [dev]
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
REQ=requirements.txt
[ "${1:-}" = "dev" ] && REQ=requirements-dev.txt
mkdir -p var

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "bootstrap: Python >= 3.11 is required ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="var/.deps-$(cat requirements.txt "$REQ" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing $REQ"
  export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1  # the browser is Debian's chromium, never a download
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -r "$REQ"
  touch "$stamp"
fi

# Redis: use the one at REDIS_URL, else start a local one (nothing on disk).
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
if ! "$VENV/bin/python" - "$REDIS_URL" <<'PY' 2>/dev/null
import sys, redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
PY
then
  if ! command -v redis-server >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "bootstrap: installing redis-server"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    else
      echo "bootstrap: no Redis answers at $REDIS_URL and redis-server is not installed; install Redis or set REDIS_URL" >&2
      exit 1
    fi
  fi
  port=$(echo "$REDIS_URL" | sed -E 's#^redis://([^@]*@)?[^:/]*:?([0-9]*).*#\2#'); port=${port:-6379}
  echo "bootstrap: starting redis-server on 127.0.0.1:$port"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$PWD/var" --logfile "$PWD/var/redis.log" --pidfile "$PWD/var/redis.pid"
  for _ in $(seq 1 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

# The browser tests drive Debian's chromium at /usr/bin/chromium (Playwright
# downloads no browser). Without it they fail, saying so.
CHROMIUM=/usr/bin/chromium
if [ "${1:-}" = "dev" ] && [ ! -x "$CHROMIUM" ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "bootstrap: installing chromium (for the browser tests)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "bootstrap: $CHROMIUM is missing: the browser tests (tests/browser) will fail;" \
      "install Debian's chromium (apt-get install chromium, as root)" >&2
  fi
fi

# The project's bytecode, written once: with PYTHONDONTWRITEBYTECODE set (as
# on many CI and container images) every process start otherwise compiles
# every module of the project again, ~0.4 s of CPU each (docs/performance.md).
"$VENV/bin/python" -m compileall -q -j 0 appproxy config dashboard fakes keys router manage.py >/dev/null

"$VENV/bin/python" manage.py migrate --noinput -v0
