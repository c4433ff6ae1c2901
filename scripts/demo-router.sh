#!/usr/bin/env bash
# ROUTER mode end to end on this machine (docs/router-mode.md):
#   a fake AppProxy coordinator with its BEP-1053 side, two fake replicas, and
#   one router node in ROUTER mode (its own var dir: var/router-demo), then
#   the Manager's steps: two endpoints, one publication (llama-4-chat, alias
#   llama-4, ratios 0.7 / 0.3), one API key. Ctrl-C stops everything.
# Needs: `make setup` (the venv) and Redis on 127.0.0.1:6379.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PORT=${ROUTER_PORT:-8000}
COORD_PORT=${DEMO_COORDINATOR_PORT:-10200}
export APPPROXY_API_SECRET=${APPPROXY_API_SECRET:-demo-api-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export APPPROXY_JWT_SECRET=${APPPROXY_JWT_SECRET:-demo-jwt-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export ROUTER_VAR_DIR=${ROUTER_VAR_DIR:-$PWD/var/router-demo}
mkdir -p "$ROUTER_VAR_DIR"
export ROUTER_CONFIG="$ROUTER_VAR_DIR/router.yaml"
cat >"$ROUTER_CONFIG" <<YAML
backends: []
appproxy_router:
  enabled: true
  coordinator_url: http://127.0.0.1:$COORD_PORT
  api_secret: \${APPPROXY_API_SECRET}
  redis_url: redis://127.0.0.1:6379/4
  authority: demo-router
  hostname: 127.0.0.1
  heartbeat_period: 5s
  reconcile_interval: 10s
YAML

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

log="$ROUTER_VAR_DIR/demo.log"
: >"$log"
$PY -m fakes.coordinator --port "$COORD_PORT" --ack-timeout 5 >>"$log" 2>&1 & pids+=($!)
$PY -m fakes.openai_backend --port 18101 --name replica-a --models served --quiet >>"$log" 2>&1 & pids+=($!)
$PY -m fakes.openai_backend --port 18102 --name replica-b --models served --quiet >>"$log" 2>&1 & pids+=($!)
$PY manage.py migrate --noinput -v0
$PY manage.py runnode --port "$PORT" >>"$log" 2>&1 & pids+=($!)

echo "demo-router: waiting for the node to register and pull (log: $log)"
for _ in $(seq 1 120); do
  if curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then break; fi
  sleep 1
done
curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null || { echo "node not ready; see $log"; exit 1; }

fc() { $PY -m fakes.coordinator "$@" --url "http://127.0.0.1:$COORD_PORT"; }
EP_A=$($PY -c 'import uuid; print(uuid.uuid4())')
EP_B=$($PY -c 'import uuid; print(uuid.uuid4())')
fc endpoint create --endpoint-id "$EP_A" --service-name llama-a --route 127.0.0.1:18101 >/dev/null
fc endpoint create --endpoint-id "$EP_B" --service-name llama-b --route 127.0.0.1:18102 >/dev/null
fc router publish --authority demo-router --model llama-4-chat --alias llama-4 --map "$EP_A=0.7" --map "$EP_B=0.3" >/dev/null
KEY="sk-demo-$($PY -c 'import secrets; print(secrets.token_urlsafe(24))')"
fc router key put --authority demo-router --key-id demo-key --key "$KEY" >/dev/null

cat <<EOF

demo-router: ROUTER mode is up on http://127.0.0.1:$PORT/v1
  published: llama-4-chat (alias llama-4) → replica-a (ratio 0.7), replica-b (0.3)
  API key:   $KEY   (the coordinator holds only its SHA-256)

  curl -s http://127.0.0.1:$PORT/v1/models -H 'Authorization: Bearer $KEY'
  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Authorization: Bearer $KEY' \\
       -H 'content-type: application/json' -d '{"model":"llama-4","messages":[{"role":"user","content":"hi"}]}'
  curl -s http://127.0.0.1:$PORT/v1/models -H 'Authorization: Bearer sk-wrong'        # 401
  APPPROXY_API_SECRET=$APPPROXY_API_SECRET $PY -m fakes.coordinator router key delete --authority demo-router --key-id demo-key --strict --url http://127.0.0.1:$COORD_PORT

  dashboard: http://127.0.0.1:$PORT/dashboard/publications/  (user admin, password in $ROUTER_VAR_DIR/admin-password)
  Ctrl-C stops everything.
EOF
wait
