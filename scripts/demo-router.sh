#!/usr/bin/env bash
# ROUTER mode end to end on this machine (docs/router-mode.md):
#   a fake AppProxy coordinator with its BEP-1053 side, two fake replicas, and
#   one router node in ROUTER mode, then the Manager's steps: two endpoints,
#   one publication (llama-4-chat, alias llama-4, ratios 0.7 / 0.3), one API
#   key. Ctrl-C stops everything: the node first (it deregisters from the
#   coordinator), then the coordinator and the replicas.
# Each run is on its own: ports the OS hands out, its own Redis namespace
# (ROUTER_REDIS_PREFIX) and event channel, its own var dir and SQLite
# database; so several copies can run at once on one machine and one Redis.
# ROUTER_PORT / DEMO_COORDINATOR_PORT / ROUTER_VAR_DIR choose a port or the
# directory instead.
# Needs: `make setup` (the venv) and Redis at REDIS_URL (default
# redis://127.0.0.1:6379/0).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
RUN_ID=$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
export ROUTER_PORT=${ROUTER_PORT:-$(free_port)}  # also the port the node registers with
COORD_PORT=${DEMO_COORDINATOR_PORT:-$(free_port)}
REPLICA_A_PORT=$(free_port)
REPLICA_B_PORT=$(free_port)
export ROUTER_REDIS_PREFIX="router-demo:$RUN_ID:"
CHANNEL="${ROUTER_REDIS_PREFIX}events"  # Pub/Sub channels are global to a Redis server, whatever its db
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}  # the node's Redis, and the event bus
export APPPROXY_API_SECRET=${APPPROXY_API_SECRET:-demo-api-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export APPPROXY_JWT_SECRET=${APPPROXY_JWT_SECRET:-demo-jwt-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')}
GIVEN_VAR_DIR=${ROUTER_VAR_DIR:+yes}
export ROUTER_VAR_DIR=${ROUTER_VAR_DIR:-$PWD/var/router-demo/$RUN_ID}
export DATABASE_URL="sqlite:///$ROUTER_VAR_DIR/db.sqlite3"
mkdir -p "$ROUTER_VAR_DIR"
export ROUTER_CONFIG="$ROUTER_VAR_DIR/router.yaml"
cat >"$ROUTER_CONFIG" <<YAML
backends: []
appproxy_router:
  enabled: true
  coordinator_url: http://127.0.0.1:$COORD_PORT
  api_secret: \${APPPROXY_API_SECRET}
  redis_url: \${REDIS_URL}
  channel: $CHANNEL
  authority: demo-router
  hostname: 127.0.0.1
  heartbeat_period: 5s
  reconcile_interval: 10s
YAML

log="$ROUTER_VAR_DIR/demo.log"
: >"$log"
cat <<EOF
demo-router: run $RUN_ID (log: $log)
  node             http://127.0.0.1:$ROUTER_PORT
  coordinator      http://127.0.0.1:$COORD_PORT
  replicas         127.0.0.1:$REPLICA_A_PORT (replica-a), 127.0.0.1:$REPLICA_B_PORT (replica-b)
  Redis namespace  $ROUTER_REDIS_PREFIX   event channel $CHANNEL
EOF

# Every process in its own session: Ctrl-C reaches this script alone, which
# stops them in order (a coordinator that died with the node would fail its
# deregistration).
detached=("$PY" -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])')
node=""
helpers=()
started=""
stop_all() {
  trap - EXIT INT TERM
  if [ -n "$node" ] && kill -0 "$node" 2>/dev/null; then
    echo "demo-router: stopping the node (it deregisters from the coordinator)"
    kill -TERM "$node" 2>/dev/null || true
    for _ in $(seq 1 600); do kill -0 "$node" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$node" 2>/dev/null || true
  fi
  for p in "${helpers[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The run's namespace is its own: leave nothing in a shared Redis.
  $PY - <<'PY' || true
import os, redis
client, prefix = redis.Redis.from_url(os.environ["REDIS_URL"]), os.environ["ROUTER_REDIS_PREFIX"]
for pattern in (f"{prefix}*", f"_kombu.binding*.{prefix}*"):
    for key in client.scan_iter(match=pattern, count=1000):
        client.delete(key)
PY
  if [ -n "$started" ] && [ -z "$GIVEN_VAR_DIR" ]; then  # a clean run leaves nothing behind
    rm -rf "$ROUTER_VAR_DIR"
  else
    echo "demo-router: stopped; log and database kept in $ROUTER_VAR_DIR"
  fi
}
trap 'stop_all' EXIT
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

"${detached[@]}" $PY -m fakes.coordinator --port "$COORD_PORT" --redis-url "$REDIS_URL" --channel "$CHANNEL" \
  --ack-timeout 5 >>"$log" 2>&1 & helpers+=($!)
"${detached[@]}" $PY -m fakes.openai_backend --port "$REPLICA_A_PORT" --name replica-a --models served --quiet >>"$log" 2>&1 & helpers+=($!)
"${detached[@]}" $PY -m fakes.openai_backend --port "$REPLICA_B_PORT" --name replica-b --models served --quiet >>"$log" 2>&1 & helpers+=($!)
$PY manage.py migrate --noinput -v0
"${detached[@]}" $PY manage.py runnode --port "$ROUTER_PORT" >>"$log" 2>&1 & node=$!

echo "demo-router: waiting for the node to register and pull"
for _ in $(seq 1 120); do
  if curl -fs "http://127.0.0.1:$ROUTER_PORT/readyz" >/dev/null 2>&1; then break; fi
  kill -0 "$node" 2>/dev/null || break
  sleep 1
done
curl -fs "http://127.0.0.1:$ROUTER_PORT/readyz" >/dev/null || { echo "demo-router: node not ready; see $log"; exit 1; }

fc() { $PY -m fakes.coordinator "$@" --url "http://127.0.0.1:$COORD_PORT"; }
EP_A=$($PY -c 'import uuid; print(uuid.uuid4())')
EP_B=$($PY -c 'import uuid; print(uuid.uuid4())')
fc endpoint create --endpoint-id "$EP_A" --service-name llama-a --route "127.0.0.1:$REPLICA_A_PORT" >/dev/null
fc endpoint create --endpoint-id "$EP_B" --service-name llama-b --route "127.0.0.1:$REPLICA_B_PORT" >/dev/null
fc router publish --authority demo-router --model llama-4-chat --alias llama-4 --map "$EP_A=0.7" --map "$EP_B=0.3" >/dev/null
KEY="sk-demo-$($PY -c 'import secrets; print(secrets.token_urlsafe(24))')"
fc router key put --authority demo-router --key-id demo-key --key "$KEY" >/dev/null
started=yes

cat <<EOF

demo-router: ROUTER mode is up on http://127.0.0.1:$ROUTER_PORT/v1
  published: llama-4-chat (alias llama-4) → replica-a (ratio 0.7), replica-b (0.3)
  API key:   $KEY   (the coordinator holds only its SHA-256)

  curl -s http://127.0.0.1:$ROUTER_PORT/v1/models -H 'Authorization: Bearer $KEY'
  curl -s http://127.0.0.1:$ROUTER_PORT/v1/chat/completions -H 'Authorization: Bearer $KEY' \\
       -H 'content-type: application/json' -d '{"model":"llama-4","messages":[{"role":"user","content":"hi"}]}'
  curl -s http://127.0.0.1:$ROUTER_PORT/v1/models -H 'Authorization: Bearer sk-wrong'        # 401
  APPPROXY_API_SECRET=$APPPROXY_API_SECRET $PY -m fakes.coordinator router key delete --authority demo-router --key-id demo-key --strict --url http://127.0.0.1:$COORD_PORT

  dashboard: http://127.0.0.1:$ROUTER_PORT/dashboard/publications/  (user admin, password in $ROUTER_VAR_DIR/admin-password)
  Ctrl-C stops everything (the node first, then the coordinator and the replicas).
EOF
wait "$node" || true
started=""  # the node stopped by itself: keep its log
echo "demo-router: the node exited; see $log"
