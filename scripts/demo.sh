#!/usr/bin/env bash
# make demo: start alpd all-in-one on its embedded NATS in a scratch data
# directory, show every service ready with its streams; ana signs in, gives
# an agent a token, the agent sends an ALP message over NLIP, and her ledger
# is exported and verified; then stop alpd with SIGTERM and check it stopped
# cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./bin
# curl plays the person's browser; install it if the machine lacks it.
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
DATA=$(mktemp -d)
PORT=${ALPD_DEMO_PORT:-18080}
LOG="$DATA/alpd.log"
trap 'kill -TERM "${PID:-}" 2>/dev/null || true; rm -rf "$DATA"' EXIT

cat >"$DATA/alpd.yaml" <<YAML
broker:
  tenants: [{domain: example.org}]
identity:
  test_idp:            # an in-process OpenID provider standing in for the organization's (demo only)
    enabled: true
    users:
      - {username: ana, password: ana-demo, roles: [alp.admin]}
YAML

echo "== starting alpd (all six services, embedded NATS, test IdP, data in $DATA)"
"$BIN/alpd" --config "$DATA/alpd.yaml" --data-dir "$DATA" --http-addr "127.0.0.1:$PORT" 2>"$LOG" &
PID=$!

for _ in $(seq 1 100); do
	if "$BIN/alpctl" --broker "http://127.0.0.1:$PORT" --timeout 1s status >/dev/null 2>&1; then break; fi
	if ! kill -0 "$PID" 2>/dev/null; then echo "alpd exited:"; cat "$LOG"; exit 1; fi
	sleep 0.2
done
echo
"$BIN/alpctl" --broker "http://127.0.0.1:$PORT" status
echo
echo "== ana signs in through her organization's IdP (the test IdP) and looks at her session"
JAR="$DATA/cookies"
curl -sfL -c "$JAR" -b "$JAR" -o /dev/null "http://127.0.0.1:$PORT/signin?tenant=example.org&login_hint=ana&return=/healthz"
curl -sf -b "$JAR" "http://127.0.0.1:$PORT/signin/session" | sed -e 's/"csrf":"[^"]*"/"csrf":"…"/'
echo
echo
echo "== ana gives an agent a personal access token (shown once)"
CSRF=$(curl -sf -b "$JAR" "http://127.0.0.1:$PORT/signin/session" | sed -n 's/.*"csrf":"\([^"]*\)".*/\1/p')
PAT=$(curl -sf -b "$JAR" -H "X-CSRF-Token: $CSRF" -H "Origin: http://127.0.0.1:$PORT" -H 'Content-Type: application/json' \
	-d '{"name":"demo agent","scopes":["alp.send","alp.read"]}' "http://127.0.0.1:$PORT/v1/pats" |
	sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
echo "token: ${PAT:0:14}…"
echo
echo "== the agent asks, in NLIP, to send bo@other.example a meeting request"
SEND='{"messagetype":"alp:meeting.request/v1","format":"text","subformat":"english","content":"Ask Bo for a planning meeting",
 "submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"},
  {"label":"alp.body","format":"structured","subformat":"json","content":{"title":"Planning","minutes":30}},
  {"format":"token","subformat":"idempotency","content":"demo-1"}]}'
curl -s -H "Authorization: Bearer $PAT" -H 'Content-Type: application/json' -d "$SEND" "http://127.0.0.1:$PORT/nlip/"
echo
echo "(no policy rule allows it yet, so alpd refuses by default and says why)"
echo
echo "== ana's ledger: the agent exports it and alpctl verifies it (tree, leaves, signed checkpoint)"
# export_ledger N waits until the log has N entries under a signed
# checkpoint (checkpoints are signed in rounds of up to 100ms), then exports.
export_ledger() {
	for _ in $(seq 1 50); do
		if [ "$(curl -sf -H "Authorization: Bearer $PAT" "http://127.0.0.1:$PORT/v1/ledger" | grep -o "\"size\":$1[,}]" | wc -l)" -ge 2 ]; then
			curl -sf -H "Authorization: Bearer $PAT" -o "$DATA/ledger.jsonl" "http://127.0.0.1:$PORT/v1/ledger/export"
			return 0
		fi
		sleep 0.1
	done
	echo "the ledger did not sign a checkpoint of $1 entries"; exit 1
}
export_ledger 1
"$BIN/alpctl" ledger verify "$DATA/ledger.jsonl" --state "$DATA/alpctl-ledgers.json"
echo
echo "== a second message; alpctl remembers the checkpoint it saw and demands the log only grew"
curl -s -o /dev/null -H "Authorization: Bearer $PAT" -H 'Content-Type: application/json' \
	-d "${SEND/demo-1/demo-2}" "http://127.0.0.1:$PORT/nlip/"
export_ledger 2
"$BIN/alpctl" ledger verify "$DATA/ledger.jsonl" --state "$DATA/alpctl-ledgers.json"
echo
echo "== the agents' authorization server (RFC 8414 metadata)"
curl -sf "http://127.0.0.1:$PORT/.well-known/oauth-authorization-server/oauth/example.org" | head -c 400
echo " …"
echo
echo "== stopping alpd (SIGTERM)"
kill -TERM "$PID"
wait "$PID"
echo "alpd stopped cleanly (exit 0)"
