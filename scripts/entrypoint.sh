#!/bin/sh
# Container entry point: migrate, then run one process type (or the whole node;
# its children write to the container's log, not to files: --child-output inherit).
set -e
python manage.py migrate --noinput -v0
case "${1:-node}" in
  node)   exec python manage.py runnode --host "$ROUTER_HOST" --port "$ROUTER_PORT" --child-output inherit ;;
  web)    exec python -m uvicorn config.asgi:application --host "$ROUTER_HOST" --port "$ROUTER_PORT" \
               --loop uvloop --http httptools --no-access-log --no-proxy-headers --workers "${ROUTER_WEB_WORKERS:-1}" ;;
  daphne) exec python -m daphne -b "$ROUTER_HOST" -p "$ROUTER_PORT" config.asgi:application ;;
  tasks)  exec celery -A config worker -B --pool threads --concurrency 4 --loglevel WARNING \
               --schedule "$ROUTER_VAR_DIR/celerybeat-schedule" ;;
  events) exec python manage.py runworker appproxy ;;
  *)      exec "$@" ;;
esac
