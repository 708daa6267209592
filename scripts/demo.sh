#!/usr/bin/env bash
# make demo: start alpd all-in-one on its embedded NATS in a scratch data
# directory, show that every service is ready with its streams, stop it with
# SIGTERM, and check it stopped cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./bin
DATA=$(mktemp -d)
PORT=${ALPD_DEMO_PORT:-18080}
LOG="$DATA/alpd.log"
trap 'kill -TERM "${PID:-}" 2>/dev/null || true; rm -rf "$DATA"' EXIT

echo "== starting alpd (all six services, embedded NATS, data in $DATA)"
ALPD_TENANTS=example.org "$BIN/alpd" --data-dir "$DATA" --http-addr "127.0.0.1:$PORT" 2>"$LOG" &
PID=$!

for _ in $(seq 1 100); do
	if "$BIN/alpctl" --broker "http://127.0.0.1:$PORT" --timeout 1s status >/dev/null 2>&1; then break; fi
	if ! kill -0 "$PID" 2>/dev/null; then echo "alpd exited:"; cat "$LOG"; exit 1; fi
	sleep 0.2
done
echo
"$BIN/alpctl" --broker "http://127.0.0.1:$PORT" status
echo
echo "== stopping alpd (SIGTERM)"
kill -TERM "$PID"
wait "$PID"
echo "alpd stopped cleanly (exit 0)"
