#!/usr/bin/env bash
# Verify an alp-ledger-export/v1 file by hand, with standard tools only
# (bash, jq, xxd, sha256sum, base64, openssl): the leaf hashes, the tree
# root against the checkpoint, the checkpoint's Ed25519 signature, and the
# commitment openings. docs/ledger.md walks through it. It is meant for
# small ledgers and for understanding; `alpctl ledger verify` does all of
# this (and more: canonical form, receipts, consistency) at scale.
#
#   bash verify-by-hand.sh alice.jsonl
set -euo pipefail
export_file=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sha() { sha256sum | cut -d' ' -f1; }
# An interior node: SHA-256(0x01 || left || right), hashes in hex.
node() { { printf '\001'; printf '%s%s' "$1" "$2" | xxd -r -p; } | sha; }

header=$(head -1 "$export_file")
log=$(jq -r .log <<<"$header")
n=$(jq -r .entries <<<"$header")
jq -j .checkpoint <<<"$header" >"$work/checkpoint"

# 1. Leaf hashes: SHA-256(0x00 || the exact leaf bytes).
for ((i = 0; i < n; i++)); do
	line=$(sed -n "$((i + 2))p" "$export_file")
	jq -j .leaf <<<"$line" >"$work/leaf$i"
	[[ $(jq -r .i "$work/leaf$i") == "$i" && $(jq -r .log "$work/leaf$i") == "$log" ]] ||
		{ echo "entry $i: wrong index or log"; exit 1; }
	{ printf '\000'; cat "$work/leaf$i"; } | sha >"$work/h$i"
	echo "leaf $i hash $(cat "$work/h$i")"
done

# 2. The root of the first <size> leaves (RFC 6962: split at the largest
#    power of two below the number of leaves, hash the halves, join them).
mth() {
	local lo=$1 hi=$2 k=1
	if ((hi - lo == 1)); then cat "$work/h$lo"; return; fi
	while ((k * 2 < hi - lo)); do k=$((k * 2)); done
	node "$(mth "$lo" $((lo + k)))" "$(mth $((lo + k)) "$hi")"
}
size=$(sed -n 2p "$work/checkpoint")
if ((size == 0)); then root=$(printf '' | sha); else root=$(mth 0 "$size"); fi
echo "root $root"
signed_root=$(sed -n 3p "$work/checkpoint" | base64 -d | xxd -p -c 32)
[[ $root == "$signed_root" ]] || { echo "ROOT MISMATCH: the checkpoint says $signed_root"; exit 1; }
echo "the root matches the checkpoint (size $size)"

# 3. The checkpoint's signature: Ed25519 over its first three lines, by the
#    key listed in the header. The signature line is
#    "— <key name> base64(4-byte key id || 64-byte signature)".
key_name=${log%/*}
key_id=$(jq -r '.keys[0].key_id' <<<"$header")
sig=$(grep "^— $key_name " "$work/checkpoint" | head -1 | cut -d' ' -f3)
[[ $(base64 -d <<<"$sig" | head -c 4 | xxd -p) == "$key_id" ]] || { echo "signature is not by key $key_id"; exit 1; }
base64 -d <<<"$sig" | tail -c 64 >"$work/sig"
head -3 "$work/checkpoint" >"$work/body"
{ xxd -r -p <<<302a300506032b6570032100; jq -r '.keys[0].public_key' <<<"$header" | base64 -d; } >"$work/pub.der"
openssl pkey -pubin -inform DER -in "$work/pub.der" -out "$work/pub.pem"
openssl pkeyutl -verify -pubin -inkey "$work/pub.pem" -rawin -in "$work/body" -sigfile "$work/sig"

# 4. Openings: SHA-256("alp-ledger-commitment/v1\n" || salt || digest)
#    must be the leaf's commitment.
for ((i = 0; i < n; i++)); do
	line=$(sed -n "$((i + 2))p" "$export_file")
	salt=$(jq -r '.salt // empty' <<<"$line")
	[[ -n $salt ]] || continue
	digest=$(jq -r .digest <<<"$line")
	c=$({ printf 'alp-ledger-commitment/v1\n'; base64 -d <<<"$salt"; xxd -r -p <<<"$digest"; } | sha)
	[[ "sha256:$c" == $(jq -r .commitment "$work/leaf$i") ]] || { echo "entry $i: the opening does not match"; exit 1; }
	echo "commitment of entry $i opens"
done
