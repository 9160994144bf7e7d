#!/usr/bin/env bash
# bench-r3-ab.sh: two herald builds side by side on the three-node load
# where a change to the cluster's hot path shows: three herald serve
# processes on 127.0.0.1, a topic of 3 shards (one led by each node), 64
# producers publishing one 1 KiB event per call over the publish stream
# straight to each shard's leader. Rounds alternate the builds (A, B, A,
# B, ...), each on fresh clusters and data; each run prints events/s,
# latency and the three servers' CPU per acknowledged event.
#
#   scripts/bench-r3-ab.sh A_BINARY B_BINARY     # e.g. built with go build -o
#
# ROUNDS (default 3) pairs of runs, DURATION (default 20s) measured after
# WARMUP (default 2s), SHARDS (default 3); LOAD (default "--batch 1
# --stream --leader-routing") replaces the load's batch and route, e.g.
# LOAD="--batch 100" for batches of 100 through the nodes in turn. Output
# on stdout, each line prefixed with A or B.
set -euo pipefail

[[ $# == 2 ]] || { echo "usage: $0 A_BINARY B_BINARY" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-2s}
SHARDS=${SHARDS:-3}
LOAD=${LOAD:-"--batch 1 --stream --leader-routing"}
read -r -a load <<< "$LOAD"

repo=$(cd "$(dirname "$0")/.." && pwd)
BENCH_NAME=bench-r3-ab
. "$repo/scripts/bench-lib.sh"

tmp=$(mktemp -d /tmp/herald-r3-ab.XXXXXX)
pids=()
trap 'stop_pids; rm -rf "$tmp"' EXIT

# run LABEL BINARY: one run on a fresh cluster of BINARY.
run() {
	local label=$1 bin=$2 i ports=() spec=() urls=()
	pids=()
	for i in 1 2 3; do
		ports+=("$(free_port)")
		spec+=("$i=127.0.0.1:${ports[i - 1]}")
		urls+=("http://127.0.0.1:${ports[i - 1]}")
	done
	for i in 1 2 3; do
		"$bin" serve --node-id "$i" --peers "$(join_by , "${spec[@]}")" --listen "127.0.0.1:${ports[i - 1]}" \
			--data-dir "$tmp/$label-$i" --log-level warn > "$tmp/$label-$i.log" 2>&1 &
		pids+=($!)
	done
	for i in 1 2 3; do
		wait_herald_serves "$bin" "${urls[i - 1]}" "node $i of $label" "$tmp/$label-$i.log"
	done
	"$bin" bench publish --server "${urls[0]}" --through "${urls[1]},${urls[2]}" --topic ab --fresh --shards "$SHARDS" \
		--producers 64 --event-bytes 1024 --keys 1024 --duration "$DURATION" --warmup "$WARMUP" "${load[@]}" \
		--server-pids "$(join_by , "${pids[@]}")" 2>&1 |
		grep -E "throughput|latency|server CPU" | sed "s/^/$label /"
	stop_pids
	rm -rf "$tmp/$label"-*
}

for round in $(seq "$ROUNDS"); do
	log "round $round of $ROUNDS"
	run A "$1"
	run B "$2"
done
