#!/usr/bin/env bash
# make demo: start alpd all-in-one on its embedded NATS in a scratch data
# directory, show every service ready with its streams; ana signs in and
# gives an agent a token; the agent writes to lee over NLIP: refused while
# they are strangers, a connection request held for lee, who accepts on his
# web session, then a meeting request decided field by field; ana's ledger
# is exported and verified; then stop alpd with SIGTERM and check it
# stopped cleanly.
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
      - {username: lee, password: lee-demo}
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
echo "== lee, a colleague, has signed in once too (so alpd knows his address)"
LJAR="$DATA/lee-cookies"
curl -sfL -c "$LJAR" -b "$LJAR" -o /dev/null "http://127.0.0.1:$PORT/signin?tenant=example.org&login_hint=lee&return=/healthz"
LCSRF=$(curl -sf -b "$LJAR" "http://127.0.0.1:$PORT/signin/session" | sed -n 's/.*"csrf":"\([^"]*\)".*/\1/p')
echo "   and gave his agent muse a personal access token (a REST-only agent, consumer class)"
LPAT=$(curl -sf -b "$LJAR" -H "X-CSRF-Token: $LCSRF" -H "Origin: http://127.0.0.1:$PORT" -H 'Content-Type: application/json' \
	-d '{"name":"muse","scopes":["alp.send","alp.read"]}' "http://127.0.0.1:$PORT/v1/pats" |
	sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
[ -n "$LPAT" ] || { echo "lee's token was not issued"; exit 1; }
echo
# send TYPE BODY KEY: ana's agent sends lee a typed message over NLIP and
# prints alpd's answer (the sentence; the JSON beside it carries every
# field's verdict).
send() {
	local msg='{"messagetype":"alp:'"$1"'","format":"text","subformat":"english","content":"from ana'"'"'s agent",
 "submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:lee@example.org"},
  {"label":"alp.body","format":"structured","subformat":"json","content":'"$2"'},
  {"format":"token","subformat":"idempotency","content":"'"$3"'"}]}'
	curl -s -H "Authorization: Bearer $PAT" -H 'Content-Type: application/json' -d "$msg" "http://127.0.0.1:$PORT/nlip/" |
		sed -n 's/^{"format":"text","subformat":"english","content":"\(\([^"\\]\|\\.\)*\)".*/  alpd: \1/p'
}
MEETING='{"subject":"Q3 planning","start":"2026-05-04T10:00:00-04:00","duration":"PT30M","attendees":["ana@example.org","lee@example.org"],"agenda":["numbers","hiring"]}'

echo "== ana's agent asks to send lee@example.org a meeting request: they are strangers"
send meeting.request/v1 "$MEETING" demo-1
echo
echo "== so it asks lee to connect: the request is held for lee, never given to his agents"
send connection.request/v1 '{"purpose":"introduction","message":"Ana here, about the Q3 plan."}' demo-2
echo
echo "== lee looks at his connections page, sees the request waiting, and accepts it"
CONN=""
for _ in $(seq 1 50); do
	CONN=$(curl -sf -b "$LJAR" "http://127.0.0.1:$PORT/v1/connections" | sed -n 's/.*"pending":\[{"id":"\([^"]*\)".*/\1/p')
	[ -n "$CONN" ] && break
	sleep 0.1
done
[ -n "$CONN" ] || { echo "lee has no pending connection request"; exit 1; }
echo "  pending: $CONN"
curl -sf -b "$LJAR" -H "X-CSRF-Token: $LCSRF" -H "Origin: http://127.0.0.1:$PORT" -X POST \
	"http://127.0.0.1:$PORT/v1/connections/$CONN/accept" | sed -n 's/.*"state":"\([^"]*\)".*/  connection: \1/p'
echo
echo "== the meeting request again: it crosses field by field (lee never opted in to free text,"
echo "   so the subject and the agenda stay with ana)"
sleep 0.3 # policy's projection picks lee's answer up from its stream
ANSWER=$(send meeting.request/v1 "$MEETING" demo-3)
echo "$ANSWER"
case "$ANSWER" in *"delivered 4 of 7 fields"*) ;; *) echo "expected the meeting request delivered in part"; exit 1 ;; esac
echo
echo "== lee's agent muse reads its inbox over REST: the broker's sender line, never the message's,"
echo "   then the fields it may see, and acknowledges the item"
ITEM=""
for _ in $(seq 1 50); do
	INBOX=$(curl -sf -H "Authorization: Bearer $LPAT" "http://127.0.0.1:$PORT/v1/agent/inbox")
	ITEM=$(printf '%s' "$INBOX" | grep -o '"id":"[^"]*","type":"meeting.request/v1"' | head -1 | sed 's/"id":"\([^"]*\)".*/\1/')
	[ -n "$ITEM" ] && break
	sleep 0.1
done
[ -n "$ITEM" ] || { echo "the meeting request did not reach lee's inbox"; exit 1; }
SENDER=$(printf '%s' "$INBOX" | grep -o '"sender":{"text":"[^"]*"' | head -1 | sed 's/.*"text":"\([^"]*\)"/\1/')
echo "  item $ITEM: $SENDER"
printf '%s' "$INBOX" | grep -o '"body":{[^}]*}' | head -1 | sed 's/^/  /'
case "$SENDER" in "from ana@example.org, verified by this broker") ;; *) echo "unexpected sender line: $SENDER"; exit 1 ;; esac
curl -sf -H "Authorization: Bearer $LPAT" -X POST "http://127.0.0.1:$PORT/v1/agent/inbox/$ITEM/ack" | sed 's/^/  ack: /'
echo
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
# Each send is two entries: the request and policy's decision; each one
# that reached lee adds his side's signed receipt (receipt.received).
export_ledger 8
"$BIN/alpctl" ledger verify "$DATA/ledger.jsonl" --state "$DATA/alpctl-ledgers.json"
echo
echo "== a second message; alpctl remembers the checkpoint it saw and demands the log only grew"
send meeting.request/v1 "$MEETING" demo-4 >/dev/null
export_ledger 11
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
