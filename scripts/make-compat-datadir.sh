#!/usr/bin/env bash
# make-compat-datadir.sh: a data directory written by an earlier herald, for
# tests/e2e/compat_test.go to open with the current one.
#
#   scripts/make-compat-datadir.sh            # herald at 2cb8eb9
#   scripts/make-compat-datadir.sh COMMIT     # herald at another commit
#
# It builds herald at COMMIT in a temporary detached git worktree (removed
# afterwards), runs that binary's `herald serve` on a fresh data directory
# on a free loopback port, and with that binary's CLI:
#
#   orders   a pull topic of 4 shards: 8 keys of 32 events each, published
#            in small batches; part of them consumed and acknowledged, some
#            of them after events left leased (and never acknowledged), so
#            the shards hold acknowledged events among pending ones
#   hooks    a push topic of 3 shards whose push_endpoint is
#            http://127.0.0.1:9/hook, where nothing listens: every delivery
#            fails, the events stay pending and attempts are recorded
#   letters  a push topic of 2 shards to the same endpoint with
#            max_retries=1 and retry_sleep_duration=0: every event ends in
#            the dead-letter queue
#
# with --snapshot-entries low, so that every shard has snapshots and log
# entries after its last one, and --segment-size small, to keep the files
# small. It stops the server with SIGTERM and writes
#
#   tests/e2e/testdata/datadir-COMMIT.tar.gz    the data directory
#   tests/e2e/testdata/datadir-COMMIT.json      what an upgrade must deliver
#
# The manifest lists, per topic, every pending event (key, payload) in
# publish order (so in order per key), the acknowledged ones that must not
# come again, and the dead letters. Both files are generated: rerun the
# script rather than edit them.
#
# The events' times are those of the run: whatever reads the directory must
# not assume how long ago that was (no topic has a time_to_live).
#
# Needs go, git, curl and python3 (a free port, the manifest). KEEP_TMP=1
# keeps the temporary directory (the data directory, the server's log).
set -euo pipefail

commit=${1:-2cb8eb9}
repo=$(git rev-parse --show-toplevel)
out="$repo/tests/e2e/testdata"
short=$(git -C "$repo" rev-parse --short=7 "$commit^{commit}")
full=$(git -C "$repo" rev-parse "$commit^{commit}")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/herald-compat.XXXXXX")
src="$tmp/src"
data="$tmp/data"
bin="$tmp/herald"
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ -d "$src" ]; then
		git -C "$repo" worktree remove --force "$src" || true
	fi
	if [ -z "${KEEP_TMP:-}" ]; then rm -rf "$tmp"; else log "kept $tmp"; fi
}
trap cleanup EXIT

log() { printf '%s\n' "$*" >&2; }

log "building herald at $short"
git -C "$repo" worktree add --quiet --detach "$src" "$full"
(cd "$src" && go build -o "$bin" ./cmd/herald)
git -C "$repo" worktree remove --force "$src"

# Nothing may listen on the push endpoints' port: their deliveries must fail.
dead_port=9
if (exec 3<>"/dev/tcp/127.0.0.1/$dead_port") 2>/dev/null; then
	log "something listens on 127.0.0.1:$dead_port; the push topics' deliveries would not fail"
	exit 1
fi
endpoint="http://127.0.0.1:$dead_port/hook"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
addr="127.0.0.1:$port"
export HERALD_SERVER="http://$addr"
h() { "$bin" "$@"; }

mkdir -p "$data"
"$bin" serve --data-dir "$data" --listen "$addr" \
	--push-allow 127.0.0.0/8 \
	--snapshot-entries 16 \
	--segment-size 65536 \
	--log-level warn >"$tmp/serve.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
	if curl -fsS "http://$addr/readyz" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$tmp/serve.log" >&2
		exit 1
	fi
	sleep 0.1
done
curl -fsS "http://$addr/readyz" >/dev/null

# published TOPIC FILE: publishes FILE's KEY<TAB>PAYLOAD lines a few at a
# time (one log entry per shard and request) and appends "KEY<TAB>PAYLOAD"
# of each to $tmp/TOPIC.published.
published() {
	h publish "$1" --keyed --batch 5 --file "$2" >/dev/null
	cat "$2" >>"$tmp/$1.published"
}

# events TOPIC KEYS FROM TO: KEY<TAB>PAYLOAD lines, key-major order
# interleaved: for each n in FROM..TO, one event of each key.
events() {
	local topic=$1 keys=$2 from=$3 to=$4 n k
	for n in $(seq "$from" "$to"); do
		for k in $(seq 0 $((keys - 1))); do
			printf 'k%d\t{"topic":"%s","key":"k%d","n":%d}\n' "$k" "$topic" "$k" "$n"
		done
	done
}

log "orders: a pull topic"
h topic create orders --shards 4 >/dev/null
events orders 8 1 20 >"$tmp/batch"
published orders "$tmp/batch"
# Lease some events and never acknowledge them, then acknowledge some of
# the others: acknowledged events then sit among pending ones.
h consume orders --no-ack --visibility 1h --max 3 --batch 3 --wait 0s -o json >/dev/null
h consume orders --max 60 --batch 10 --wait 0s -o json >"$tmp/orders.acked.json"
events orders 8 21 30 >"$tmp/batch"
published orders "$tmp/batch"
h consume orders --max 20 --batch 5 --wait 0s -o json >>"$tmp/orders.acked.json"
# And a few more, which the shards' logs hold after their last snapshots.
events orders 8 31 32 >"$tmp/batch"
published orders "$tmp/batch"

log "hooks: a push topic whose endpoint never answers"
h topic create hooks --shards 3 --push-endpoint "$endpoint" \
	--attr retry_sleep_duration=1 >/dev/null
# Changes of attributes, enough for the controller to snapshot its state
# (with orders and hooks in it) before letters is created.
for i in $(seq 20); do
	h topic set orders --attr opaque_data="generation $i" >/dev/null
done
events hooks 6 1 10 >"$tmp/batch"
published hooks "$tmp/batch"

log "letters: a push topic whose events are dead-lettered"
h topic create letters --shards 2 --push-endpoint "$endpoint" \
	--attr max_retries=1 --attr retry_sleep_duration=0 >/dev/null
events letters 3 1 4 >"$tmp/batch"
published letters "$tmp/batch"
want=$(wc -l <"$tmp/letters.published")
for _ in $(seq 300); do
	got=$(h dlq list letters --max 1000 -o json | grep -c . || true)
	if [ "$got" -eq "$want" ]; then
		break
	fi
	sleep 0.1
done
h dlq list letters --max 1000 -o json >"$tmp/letters.dead.json"
if [ "$(grep -c . "$tmp/letters.dead.json")" -ne "$want" ]; then
	log "letters: $(grep -c . "$tmp/letters.dead.json") of $want events dead-lettered"
	exit 1
fi

# More events for hooks after its first failures, so its shards' logs
# hold attempts between publishes.
sleep 2
events hooks 6 11 15 >"$tmp/batch"
published hooks "$tmp/batch"
sleep 2

h topic stats orders -o json >"$tmp/orders.stats.json"
h topic stats hooks -o json >"$tmp/hooks.stats.json"

log "stopping herald serve (SIGTERM)"
kill -TERM "$pid"
wait "$pid"
pid=

# The manifest: per topic, the pending events in publish order, the
# acknowledged ones and the dead letters; checked against the server's own
# counts of pending events.
python3 - "$tmp" "$full" "$short" >"$out/datadir-$short.json" <<'PY'
import base64, json, sys

tmp, full, short = sys.argv[1:4]

def published(topic):
    out = []
    with open(f"{tmp}/{topic}.published") as f:
        for line in f:
            key, payload = line.rstrip("\n").split("\t", 1)
            out.append({"key": key, "payload": payload})
    return out

def records(path):
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                r = r.get("event", r)  # a dead letter holds its event
                out.append({"id": r["id"], "key": r.get("key", ""),
                            "payload": base64.b64decode(r.get("payload", "")).decode()})
    return out

def pending_count(topic):
    with open(f"{tmp}/{topic}.stats.json") as f:
        return int(json.load(f)["total"]["events"])

acked = records(f"{tmp}/orders.acked.json")
done = {(a["key"], a["payload"]) for a in acked}
orders = [e for e in published("orders") if (e["key"], e["payload"]) not in done]
hooks = published("hooks")
dead = records(f"{tmp}/letters.dead.json")
for topic, pending in (("orders", orders), ("hooks", hooks)):
    if pending_count(topic) != len(pending):
        sys.exit(f"{topic}: the server counts {pending_count(topic)} pending events, the manifest {len(pending)}")
if len(done) != len(acked):
    sys.exit("orders: an event was acknowledged twice")

manifest = {
    "generated": f"by scripts/make-compat-datadir.sh {short}: do not edit, run the script again",
    "commit": full,
    "topics": {
        "orders": {"shards": 4, "pending": orders, "acked": acked},
        "hooks": {"shards": 3, "pending": hooks},
        "letters": {"shards": 2, "dead": dead},
    },
}
# Indented, with one event a line.
def compact(o, depth=0):
    pad = " " * depth
    if isinstance(o, dict) and o and not all(isinstance(v, str) for v in o.values()):
        items = [f'{pad} {json.dumps(k)}: {compact(v, depth + 1).lstrip()}' for k, v in o.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, list) and o:
        return pad + "[\n" + ",\n".join(compact(v, depth + 1) for v in o) + "\n" + pad + "]"
    return pad + json.dumps(o)
print(compact(manifest))
PY

# The data directory, without what would differ between runs of tar.
tar -C "$data" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . |
	gzip -9n >"$out/datadir-$short.tar.gz"
log "wrote $out/datadir-$short.tar.gz ($(wc -c <"$out/datadir-$short.tar.gz") bytes) and $out/datadir-$short.json"
