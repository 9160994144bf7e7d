#!/usr/bin/env bash
# bench-tier-io.sh: what tiering costs and gives on one node, against a
# local S3 server (moto_server, which scripts/install-test-deps.sh
# installs), with the settings alternating within one sitting:
#
#   scripts/bench-tier-io.sh publish   # herald bench publish at full speed,
#                                      # tiering off and on: events/s, and
#                                      # MB/s uploaded (herald_tier_uploaded_bytes_total)
#   scripts/bench-tier-io.sh consume   # herald bench consume of a backlog
#                                      # read locally and read back from the store
#
# Each round starts a new herald serve (and moto_server) on loopback for
# each setting, the order reversed every other round. Settings, from the
# environment: HERALD (the binary, default: built into $OUT/bin), OUT
# (/tmp/tier-bench), ROUNDS (3), SEGMENT (--segment-size, 1 MiB),
# INTERVAL (--tier-interval, 10s), STORE (moto, or file: a directory,
# which leaves moto_server's own CPU out of a 2-core machine), SERVE_ARGS
# (more flags for herald serve, split on spaces); publish: DURATION (20s), PRODUCERS
# (32), SHARDS (11); consume: BACKLOG (200000), DRAIN_AFTER (20s).
# Take /tmp/herald-test.lock around it on a shared machine.
set -euo pipefail
mode=${1:?usage: bench-tier-io.sh publish|consume}
repo=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/tier-bench}
ROUNDS=${ROUNDS:-3}
SEGMENT=${SEGMENT:-1048576}
INTERVAL=${INTERVAL:-10s}
DURATION=${DURATION:-20s}
PRODUCERS=${PRODUCERS:-32}
SHARDS=${SHARDS:-11}
BACKLOG=${BACKLOG:-200000}
DRAIN_AFTER=${DRAIN_AFTER:-20s}
STORE=${STORE:-moto}
mkdir -p "$OUT/bin"
if [[ -z ${HERALD:-} ]]; then
	HERALD=$OUT/bin/herald
	(cd "$repo" && go build -o "$HERALD" ./cmd/herald)
fi
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
log() { printf '%s bench-tier-io: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT
stop_all() { cleanup; pids=(); }

# start_moto: a fresh moto_server with a bucket "tier" (or with STORE=file
# a fresh directory); sets tier_url.
start_moto() {
	local port
	if [[ $STORE == file ]]; then
		rm -rf "$OUT/store" && mkdir -p "$OUT/store"
		tier_url=file://$OUT/store
		return
	fi
	port=$(free_port)
	moto_server -H 127.0.0.1 -p "$port" > "$OUT/moto-$port.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/" > /dev/null && break; sleep 0.1; done
	curl -sf -X PUT "http://127.0.0.1:$port/tier" > /dev/null
	tier_url="s3://tier?endpoint=http://127.0.0.1:$port&region=us-east-1&use_path_style=true"
}

# start_herald DIR FLAG...: herald serve on a free port; sets url.
start_herald() {
	local dir=$1 port
	shift
	port=$(free_port)
	rm -rf "$dir"
	# shellcheck disable=SC2086 # SERVE_ARGS is a list
	"$HERALD" serve --data-dir "$dir" --listen "127.0.0.1:$port" --log-level warn --segment-size "$SEGMENT" "$@" ${SERVE_ARGS:-} > "$dir.log" 2>&1 &
	pids+=($!)
	url=http://127.0.0.1:$port
	for _ in $(seq 600); do "$HERALD" --server "$url" topic list > /dev/null 2>&1 && return; sleep 0.1; done
	echo "herald serve did not start: $(tail -n 20 "$dir.log")" >&2
	exit 1
}

metric() { curl -sf "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

publish_run() { # publish_run ROUND SETTING
	local round=$1 setting=$2 flags=() res before after t0 t1
	if [[ $setting == on ]]; then
		start_moto
		# debug: the reconciler's line per cycle, with its bytes and time.
		flags=(--tier-url "$tier_url" --tier-interval "$INTERVAL" --log-level debug)
	fi
	start_herald "$OUT/data-publish-$setting" "${flags[@]}"
	res=$OUT/publish-$STORE-r$round-$setting.json
	before=$(metric herald_tier_uploaded_bytes_total)
	t0=$(date +%s.%N)
	"$HERALD" --server "$url" bench publish --topic bench --fresh --shards "$SHARDS" --producers "$PRODUCERS" \
		--event-bytes 1024 --duration "$DURATION" --warmup 3s -o json --results "$res" > /dev/null
	t1=$(date +%s.%N)
	after=$(metric herald_tier_uploaded_bytes_total)
	python3 - "$res" "$round" "$setting" "${before:-}" "${after:-}" "$t0" "$t1" "$OUT/data-publish-$setting.log" << 'PY' | tee -a "$OUT/publish-rounds-$STORE.txt"
import json, re, sys
res, rnd, setting, before, after, t0, t1, log = sys.argv[1:]
r = json.load(open(res))
up = ""
if before and after:
    up = "uploaded %.1f MB in %.1f s: %.2f MB/s" % ((float(after) - float(before)) / 1e6, float(t1) - float(t0), (float(after) - float(before)) / 1e6 / (float(t1) - float(t0)))
    # The cycles that uploaded: their bytes over their own time.
    unit = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    def secs(d):
        return sum(float(v) * (60.0 if u == "m" else unit[u]) for v, u in re.findall(r"([0-9.]+)(ns|µs|us|ms|m(?!s)|s)", d))
    cyc = [(int(m.group(1)), secs(m.group(2))) for m in re.finditer(r'msg="tiering cycle".* bytes=(\d+) .* took=(\S+)', open(log, encoding="utf-8", errors="replace").read())]
    cyc = [c for c in cyc if c[0] > 0]
    if cyc:
        up += "; %d cycles uploaded %.1f MB in %.1f s of cycle time: %.1f MB/s while cycling" % (len(cyc), sum(b for b, _ in cyc) / 1e6, sum(t for _, t in cyc), sum(b for b, _ in cyc) / 1e6 / sum(t for _, t in cyc))
print("round %s tiering %-3s: %.0f events/s, %.2f MB/s published, p50 %.2f ms, p99 %.2f ms, errors %d; %s" % (
    rnd, setting, r["events_per_second"], r["mb_per_second"], r["latency_ms"]["p50"], r["latency_ms"]["p99"], r["errors"], up))
PY
	stop_all
}

consume_run() { # consume_run ROUND SETTING
	local round=$1 setting=$2 retention res
	start_moto
	if [[ $setting == tiered ]]; then retention=4096; else retention=$((4 << 30)); fi
	start_herald "$OUT/data-consume-$setting" --tier-url "$tier_url" --tier-interval 1s --tier-local-retention "$retention"
	res=$OUT/consume-$STORE-r$round-$setting.json
	"$HERALD" --server "$url" bench consume --topic backlog --shards 4 --backlog "$BACKLOG" --keys 1024 \
		--consumers 4 --batch 1000 --event-bytes 1024 --drain-after "$DRAIN_AFTER" -o json --results "$res" > /dev/null
	python3 - "$res" "$round" "$setting" "$(metric herald_tier_read_bytes_total)" "$(metric herald_tier_uploaded_bytes_total)" "$(metric herald_tier_reads_total)" "$(metric herald_tier_cache_hits_total)" << 'PY' | tee -a "$OUT/consume-rounds-$STORE.txt"
import json, sys
res, rnd, setting, read, up, reads, hits = sys.argv[1:]
r = json.load(open(res))
print("round %s backlog %-6s: %.0f events/s, %.2f MB/s drained, fetch p50 %.2f ms, p99 %.2f ms; %.1f MB uploaded, %.1f MB read from the store in %s runs, %s cache hits" % (
    rnd, setting, r["events_per_second"], r["mb_per_second"], r["fetch_latency_ms"]["p50"], r["fetch_latency_ms"]["p99"],
    float(up or 0) / 1e6, float(read or 0) / 1e6, reads, hits))
PY
	stop_all
}

case $mode in
publish) settings=(off on) run=publish_run ;;
consume) settings=(local tiered) run=consume_run ;;
*) echo "bench-tier-io: publish or consume, not $mode" >&2; exit 2 ;;
esac
log "$mode: $ROUNDS rounds of ${settings[*]}, store $STORE, segment $SEGMENT, herald $HERALD"
for round in $(seq "$ROUNDS"); do
	order=("${settings[@]}")
	if ((round % 2 == 0)); then order=("${settings[1]}" "${settings[0]}"); fi
	for s in "${order[@]}"; do
		"$run" "$round" "$s"
	done
done
