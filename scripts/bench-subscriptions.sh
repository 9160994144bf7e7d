#!/usr/bin/env bash
# bench-subscriptions.sh: what fan-out costs, side by side in one run.
#
#   scripts/bench-subscriptions.sh                 # defaults below, ~6 minutes
#   ROUNDS=1 DURATION=5s scripts/bench-subscriptions.sh
#
# Two measurements, each on a fresh herald serve (127.0.0.1, a temporary
# data directory), ROUNDS rounds with the settings' order alternating; the
# table shows medians:
#
#   publish   herald bench publish --subscriptions N for N in SUBS_PUBLISH
#             (default "0 1 10"): idle pull subscriptions, so the run
#             measures what publishing pays for each subscription it fans
#             out to (the shards queue every event once per cursor).
#   fan-out   herald bench consume --mode push --subscriptions N for N in
#             SUBS_FANOUT (default "1 10"): a backlog of BACKLOG events
#             delivered to N webhook subscriptions on a fast receiver of
#             the bench's own, each getting every event. Reported: events
#             delivered per second, and the server's CPU (its
#             process_cpu_seconds_total) per delivered and per published
#             event over the drain.
#
# Output: raw JSON per run and table.md in OUT (default a temporary
# directory); the table is printed too. Holds LOCK (default
# /tmp/herald-bench.lock) while it runs.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-15s}
PRODUCERS=${PRODUCERS:-16}
BATCH=${BATCH:-100}
SHARDS=${SHARDS:-4}
BACKLOG=${BACKLOG:-100000}
SUBS_PUBLISH=${SUBS_PUBLISH:-"0 1 10"}
SUBS_FANOUT=${SUBS_FANOUT:-"1 10"}
LOCK=${LOCK:-/tmp/herald-bench.lock}
OUT=${OUT:-$(mktemp -d /tmp/herald-subs-bench.XXXXXX)}

cd "$(dirname "$0")/.."
mkdir -p "$OUT/raw"
exec 9>"$LOCK"
flock 9

bin=$OUT/herald
go build -o "$bin" ./cmd/herald

server_pid=""
server_dir=""
# stop_server stops the server and removes its data directory (its log
# stays beside the raw results): a run's backlogs would fill the disk.
stop_server() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
		server_pid=""
	fi
	if [ -n "$server_dir" ]; then
		rm -rf "$server_dir"
		server_dir=""
	fi
}
trap stop_server EXIT

# start_server starts a fresh herald serve and sets SERVER to its URL.
start_server() {
	local dir port
	dir=$(mktemp -d "$OUT/data.XXXXXX")
	server_dir=$dir
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$bin" serve --data-dir "$dir" --listen "127.0.0.1:$port" --push-allow 127.0.0.1/32 >"$dir.log" 2>&1 &
	server_pid=$!
	SERVER=http://127.0.0.1:$port
	for _ in $(seq 100); do
		curl -sf "$SERVER/readyz" >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "herald serve did not become ready; see $dir.log" >&2
	exit 1
}

order() { # the words of $1, reversed on odd rounds
	if [ $(($2 % 2)) -eq 1 ]; then echo "$1" | tr ' ' '\n' | tac | tr '\n' ' '; else echo "$1"; fi
}

for round in $(seq "$ROUNDS"); do
	for n in $(order "$SUBS_PUBLISH" "$round"); do
		start_server
		"$bin" bench publish --server "$SERVER" --topic bench --fresh --shards "$SHARDS" \
			--producers "$PRODUCERS" --batch "$BATCH" --duration "$DURATION" --subscriptions "$n" \
			--results "$OUT/raw/publish-$n-round$round.json" >/dev/null
		stop_server
	done
	for n in $(order "$SUBS_FANOUT" "$round"); do
		start_server
		"$bin" bench consume --server "$SERVER" --mode push --backlog "$BACKLOG" --shards "$SHARDS" \
			--subscriptions "$n" --results "$OUT/raw/fanout-$n-round$round.json" >/dev/null
		stop_server
	done
done

python3 - "$OUT" <<'EOF' | tee "$OUT/table.md"
import json, statistics, sys, glob, os, re
out = sys.argv[1]
def runs(kind, n):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{out}/raw/{kind}-{n}-round*.json"))]
def med(xs): return statistics.median(xs)
print("| publish: subscriptions | events/s (median) | p50 ms | p99 ms | rounds |")
print("|---|---|---|---|---|")
for n in sorted({int(re.search(r"publish-(\d+)-", f).group(1)) for f in glob.glob(f"{out}/raw/publish-*.json")}):
    rs = runs("publish", n)
    print(f"| {n} | {med([r['events_per_second'] for r in rs]):,.0f} | {med([r['latency_ms']['p50'] for r in rs]):.2f} | {med([r['latency_ms']['p99'] for r in rs]):.2f} | {len(rs)} |")
print()
print("| fan-out: webhook subscriptions | delivered events/s (median) | server CPU µs per delivered event | server CPU µs per published event | rounds |")
print("|---|---|---|---|---|")
for n in sorted({int(re.search(r"fanout-(\d+)-", f).group(1)) for f in glob.glob(f"{out}/raw/fanout-*.json")}):
    rs = runs("fanout", n)
    d = med([float(r['settings']['server_cpu_us_per_delivered_event']) for r in rs])
    p = med([float(r['settings']['server_cpu_us_per_published_event']) for r in rs])
    print(f"| {n} | {med([r['events_per_second'] for r in rs]):,.0f} | {d:.1f} | {p:.1f} | {len(rs)} |")
EOF
echo "raw results in $OUT/raw"
