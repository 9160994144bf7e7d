#!/usr/bin/env bash
# bench-snapshot-tail.sh: what snapshots cost publish latency. The same
# publish load through herald with snapshots every SNAPSHOT_ENTRIES entries
# (default 10000, herald's default) and with snapshots off (herald serve
# --snapshots=false), side by side in one run, on a topic of one shard that
# starts empty or holding BACKLOG (default 1000000) undelivered events (so
# that its snapshot, an entry per pending event, is then largest).
#
#   scripts/bench-snapshot-tail.sh               # single nodes
#   NODES=3 scripts/bench-snapshot-tail.sh       # three-node clusters
#
# Two servers (or clusters) run side by side, snapshots on and off, each
# on 127.0.0.1 with its data in a temporary directory. For each BATCH in
# BATCHES (default "1 500") and each starting backlog (0 and BACKLOG), each
# run makes its topic afresh (herald bench publish --fresh --shards 1),
# fills the backlog if any (FILL_BATCH events per publish, not measured),
# then publishes PRODUCERS producers' batches of EVENT_BYTES-byte events
# for DURATION after WARMUP. Nothing consumes: the shard's backlog grows
# during the run too. The topic is deleted after each run, and the next
# starts once every node has removed its files (wait_data_freed). ROUNDS
# rounds, the order of the runs rotated and reversed each round; the
# table shows medians, and each run's snapshots
# (herald_snapshot_duration_seconds_count over the run, warm-up included).
#
# SNAPSHOT_ENTRIES=off makes the "on" server take no snapshots either: two
# identical servers, whose ratios show how far apart this machine measures
# runs that differ in nothing (the resolution of the 10 % goal).
#
# Each run also shows the CPU time the hypervisor took from the machine in
# its measured interval (server_cpu.machine_steal_seconds of its results,
# from /proc/stat): on a shared virtual machine, runs whose host took
# much have stalls no server setting explains (BENCHMARKS, "Three nodes:
# the control").
#
# Output in OUT (default /tmp/herald-snapshot-tail): raw/ (one JSON per
# run, with the snapshots taken in its settings), table.md.
set -euo pipefail

NODES=${NODES:-1}
BATCHES=${BATCHES:-"1 500"}
BACKLOG=${BACKLOG:-1000000}
SNAPSHOT_ENTRIES=${SNAPSHOT_ENTRIES:-10000}
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
PRODUCERS=${PRODUCERS:-64}
EVENT_BYTES=${EVENT_BYTES:-1024}
KEYS=${KEYS:-1024}
FILL_BATCH=${FILL_BATCH:-500}
SERVE_ARGS=${SERVE_ARGS:-}
OUT=${OUT:-/tmp/herald-snapshot-tail}

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
BENCH_NAME=bench-snapshot-tail
. "$repo/scripts/bench-lib.sh"

tmp=$(mktemp -d /tmp/herald-snapshot-tail.XXXXXX)
pids=()
cleanup() {
	stop_pids
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


log "building herald and bench-table"
mkdir -p "$tmp/bin"
go build -o "$tmp/bin/herald" ./cmd/herald
go build -o "$tmp/bin/bench-table" ./bench/cmd/bench-table
version=$(git rev-parse --short HEAD)
[[ -z $(git status --porcelain --untracked-files=no) ]] || version+=" with uncommitted changes"

# start NAME FLAG...: NODES herald serve processes with FLAGs; sets
# NAME_urls (comma-separated) and NAME_pids (comma-separated).
start() {
	local name=$1 i ports=() spec=() urls=() mine=()
	shift
	for ((i = 1; i <= NODES; i++)); do
		ports+=("$(free_port)")
		spec+=("$i=127.0.0.1:${ports[i - 1]}")
		urls+=("http://127.0.0.1:${ports[i - 1]}")
	done
	for ((i = 1; i <= NODES; i++)); do
		local cluster=()
		((NODES > 1)) && cluster=(--node-id "$i" --peers "$(join_by , "${spec[@]}")")
		# shellcheck disable=SC2086 # SERVE_ARGS is words
		"$tmp/bin/herald" serve "${cluster[@]}" --listen "127.0.0.1:${ports[i - 1]}" \
			--data-dir "$tmp/$name-$i" --log-level warn "$@" $SERVE_ARGS > "$tmp/$name-$i.log" 2>&1 &
		pids+=($!)
		mine+=($!)
	done
	for ((i = 1; i <= NODES; i++)); do
		wait_herald_serves "$tmp/bin/herald" "${urls[i - 1]}" "$name-$i" "$tmp/$name-$i.log" "${mine[i - 1]}"
	done
	printf -v "${name}_urls" '%s' "$(join_by , "${urls[@]}")"
	printf -v "${name}_pids" '%s' "$(join_by , "${mine[@]}")"
	log "$name: $NODES node(s) on $(join_by , "${urls[@]}") (pids ${mine[*]}), flags: $* $SERVE_ARGS"
}
if [[ $SNAPSHOT_ENTRIES == off ]]; then
	start on --snapshots=false
else
	start on --snapshot-entries "$SNAPSHOT_ENTRIES"
fi
start off --snapshots=false

# snapshots URLS: snapshots taken so far, summed over the nodes.
snapshots() {
	local u n=0 v
	for u in ${1//,/ }; do
		v=$(curl -fsS "$u/metrics" | awk '$1 == "herald_snapshot_duration_seconds_count" {print $2}')
		n=$((n + ${v:-0}))
	done
	echo "$n"
}

# run_one SERVER BATCH BACKLOG FILE
run_one() {
	local server=$1 batch=$2 backlog=$3 file=$4 urls pidlist label through=()
	urls=${server}_urls
	urls=${!urls}
	pidlist=${server}_pids
	pidlist=${!pidlist}
	((NODES > 1)) && through=(--through "${urls#*,}")
	label="1 shard, snapshots $server"
	if [[ $server == on && $SNAPSHOT_ENTRIES == off ]]; then
		label="1 shard, snapshots off (control)"
	elif [[ $server == on ]]; then
		label+=" (every $SNAPSHOT_ENTRIES entries)"
	fi
	label+=", backlog $backlog"
	local common=(--server "${urls%%,*}" "${through[@]}" --topic tail --shards 1 --event-bytes "$EVENT_BYTES" --keys "$KEYS")
	local fresh=(--fresh)
	if ((backlog > 0)); then
		"$tmp/bin/herald" bench publish "${common[@]}" --fresh --producers 16 --batch "$FILL_BATCH" \
			--count "$backlog" > /dev/null
		fresh=()
	fi
	local before after
	before=$(snapshots "$urls")
	"$tmp/bin/herald" bench publish "${common[@]}" "${fresh[@]}" --producers "$PRODUCERS" --batch "$batch" \
		--duration "$DURATION" --warmup "$WARMUP" --label "$label" --server-pids "$pidlist" \
		--results "$file" > /dev/null
	after=$(snapshots "$urls")
	python3 - "$file" "$((after - before))" <<-'PY'
		import json, sys
		f, n = sys.argv[1], int(sys.argv[2])
		r = json.load(open(f))
		r.setdefault("settings", {})["snapshots_taken"] = str(n)
		json.dump(r, open(f, "w"), indent=2)
		l, c = r["latency_ms"], r["server_cpu"]
		print("  %.0f events/s, p99 %.2f p99.9 %.2f max %.2f ms, %d snapshots, server CPU %.1f µs/event, %.0f ms of CPU stolen" % (
		    r["events_per_second"], l["p99"], l["p99_9"], l["max"], n, c["us_per_event"], c["machine_steal_seconds"] * 1000), file=sys.stderr)
	PY
	"$tmp/bin/herald" --server "${urls%%,*}" topic delete --force tail > /dev/null
	wait_data_freed "$server"
}

# wait_data_freed SERVER: waits until every node of SERVER has removed the
# deleted topic's shard directories, then flushes the disk. Each node
# removes them as it applies the delete, not necessarily before the
# delete returns, and freeing gigabytes holds up every fdatasync on the
# disk for a while (BENCHMARKS, "Three nodes: the control"); the next run
# must not measure that.
wait_data_freed() {
	local i tries
	for ((i = 1; i <= NODES; i++)); do
		for ((tries = 0; ; tries++)); do
			[[ -z $(ls -A "$tmp/$1-$i/shards" 2> /dev/null) ]] && break
			((tries < 600)) || die "$1-$i still holds $(ls "$tmp/$1-$i/shards") a minute after the topic was deleted"
			sleep 0.1
		done
	done
	sync
}

# per_run EXPR TITLE: TITLE, then EXPR (Python, over a run's results r)
# of each run, a line per kind of run, rounds in order.
per_run() {
	local item server batch backlog round
	echo "$2"
	echo
	for item in "${runs[@]}"; do
		read -r server batch backlog <<< "$item"
		printf -- '- snapshots %s, batch %s, backlog %s:' "$server" "$batch" "$backlog"
		for ((round = 1; round <= ROUNDS; round++)); do
			printf ' %s' "$(python3 -c 'import json, sys; print(eval(sys.argv[2], {"r": json.load(open(sys.argv[1]))}))' "$OUT/raw/$server-batch$batch-backlog$backlog-round$round.json" "$1")"
		done
		echo
	done
}

runs=()
for batch in $BATCHES; do
	for backlog in 0 "$BACKLOG"; do
		for server in on off; do runs+=("$server $batch $backlog"); done
	done
done
mkdir -p "$OUT/raw"
rm -f "$OUT"/raw/*.json
log "${#runs[@]} runs per round, $ROUNDS rounds"
for ((round = 1; round <= ROUNDS; round++)); do
	n=${#runs[@]} order=()
	for ((i = 0; i < n; i++)); do order+=("${runs[(i + round - 1) % n]}"); done
	if ((round % 2 == 0)); then
		rev=()
		for ((i = n - 1; i >= 0; i--)); do rev+=("${order[i]}"); done
		order=("${rev[@]}")
	fi
	for item in "${order[@]}"; do
		read -r server batch backlog <<< "$item"
		log "round $round of $ROUNDS: snapshots $server, batch $batch, backlog $backlog"
		run_one "$server" "$batch" "$backlog" "$OUT/raw/$server-batch$batch-backlog$backlog-round$round.json"
	done
done

{
	echo "Machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr); herald $version; $NODES node(s)"
	echo "Load: $PRODUCERS producers, $EVENT_BYTES-byte events, $KEYS keys, one shard; $DURATION measured after $WARMUP warm-up; median of $ROUNDS rounds"
	echo
	"$tmp/bin/bench-table" --targets none "$OUT"/raw/*.json
	echo
	per_run 'r["settings"]["snapshots_taken"]' "Snapshots taken per run (warm-up included), rounds in order:"
	echo
	per_run 'round(r["server_cpu"]["machine_steal_seconds"] * 1000)' "CPU time the hypervisor took from the machine in each run's measured interval, ms (steal, /proc/stat), rounds in order:"
} > "$OUT/table.md"
cat "$OUT/table.md"
