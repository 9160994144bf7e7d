#!/usr/bin/env bash
# bench-peers.sh: the same publish load through herald, NATS JetStream and a
# RabbitMQ quorum queue on this machine, at matched durability, in one table.
#
#   scripts/bench-peers.sh                      # defaults below, ~16 minutes
#   DURATION=5s ROUNDS=1 scripts/bench-peers.sh # a quick look
#
# Systems, each acknowledging a publish only as said:
#   herald        a topic of 11 shards (the default) and one of 1 shard
#                 (HERALD_SHARDS): fsync before every ack; at batch 1 also
#                 with the client's publish batching (HERALD_CLIENT_BATCHING)
#                 and over publish streams (HERALD_STREAM; in r3 mode also
#                 with leader routing)
#   nats-always   JetStream, file storage, R1, sync_interval: always (fsync on
#                 every write, before the PubAck)
#   nats-default  the same with JetStream's default sync_interval (2 minutes):
#                 acked WITHOUT fsync, labelled so in the table
#   rabbitmq      a quorum queue with publisher confirms (confirmed after its
#                 Raft log write is fsynced)
#
# Every system gets the same load from package bench/load: PRODUCERS
# producers, each publishing a batch of BATCH events of EVENT_BYTES random
# bytes (keys among KEYS) and waiting for the acks before the next batch,
# for DURATION after WARMUP, for each BATCH in BATCHES. Rounds alternate
# the order of the systems; the table shows the median of ROUNDS runs.
#
# What is missing is installed: rabbitmq-server with apt-get (as root), and a
# nats-server that knows sync_interval (Debian's 2.9 does not) with
# "go install github.com/nats-io/nats-server/v2@latest" into a cache
# directory (NATS_SERVER=path picks one instead). Every server listens on
# 127.0.0.1 only, on free ports, with its data in a temporary directory; all
# are stopped by PID when the script exits. Each run holds
# /tmp/herald-bench.lock (flock) so that heavy runs on a shared machine do
# not overlap.
#
# Every table also has the servers' CPU per acknowledged event: the user
# plus system CPU time (utime + stime of /proc/PID/stat) of all the server
# processes of the system measured (herald serve, nats-server, RabbitMQ's
# beam.smp; the three nodes of a cluster summed), read by the load
# generator (--server-pids) just before the measured interval (after the
# warm-up; in the consume phase, after the fill) and just after its last
# acknowledgement, divided by the events acknowledged in it, in µs. The load
# generator's own CPU is not in it.
#
# Output: the raw results (one JSON file per run), summary.json (medians)
# and table.md in OUT; the table is printed too. scripts/plot-bench.py draws
# the plots from summary.json.
#
# To compare settings of herald itself (shard counts, snapshots,
# persistence) on servers of its own, run "go run ./bench/cmd/herald-compare".
#
# R3 mode, "scripts/bench-peers.sh r3": every system as a three-node
# cluster on this machine, each event replicated to all three.
#
#   herald        three herald serve processes (--node-id, --peers), a topic
#                 of HERALD_SHARDS shards (default 3: one led by each node),
#                 herald's own snapshot settings (a snapshot every 10,000
#                 entries, written in the background) unless SNAPSHOT_ENTRIES
#                 sets --snapshot-entries (1000 makes snapshots frequent
#                 enough for the herald-sync comparison to show); the publish
#                 stream with leader routing also with a topic of 1 shard,
#                 one ordered log with one leader, as the peers' R3 stream
#                 and quorum queue are
#   herald-sync   a second such cluster writing its snapshots on the apply
#                 loop (HERALD_BENCH_SYNC_SNAPSHOTS=1, a switch for this
#                 comparison only, not a herald setting), run at
#                 SNAPSHOT_BATCHES (default "1 500") against herald at the
#                 same batches: the sync vs async snapshots experiment
#   nats-always   three nats-server processes in one cluster (routes), an R3
#                 stream, sync_interval: always
#   nats-default  the same with the default sync_interval: not fsyncing
#   rabbitmq      three RabbitMQ nodes (their own names, ports and data, one
#                 private epmd) joined with rabbitmqctl join_cluster, a
#                 quorum queue of 3 members
#
# Producers take the three nodes in turn (herald bench publish --through;
# the peer clients' comma-separated URLs). Defaults: DURATION 15s, ROUNDS
# 3, OUT docs/bench/r3-results; the report has two tables, R3 against the
# peers (with the R3 targets) and the snapshots experiment.
#
# Consume mode, "scripts/bench-peers.sh consume": each system on one node
# as above is filled with a backlog of BACKLOG events (EVENT_BYTES bytes,
# keys among KEYS; not timed), then drained, for each BACKLOG in BACKLOGS
# (default "10000 100000 1000000") and KEYS in KEYS_LIST (default "40
# 1024"):
#
#   herald        a topic of HERALD_SHARDS shards (default 11), CONSUMERS
#                 pull consumers (default 4) each fetching CONSUME_BATCH
#                 events (default 100) and acking them in one request,
#                 answered once committed
#   herald-push   the same topic pushing to a receiver of the bench's on
#                 127.0.0.1 (herald serve --push-allow 127.0.0.1/32)
#   nats-always   a durable JetStream pull consumer, CONSUMERS clients
#                 fetching CONSUME_BATCH messages, each acked explicitly and
#                 the batch's last with a double ack (confirmed by the
#                 server); sync_interval: always
#   nats-default  the same with the default sync_interval
#   rabbitmq      the quorum queue, CONSUMERS consumers with a prefetch of
#                 CONSUME_BATCH, one basic.ack (multiple) per batch, which
#                 AMQP does not confirm
#
# Defaults: ROUNDS 3, OUT docs/bench/consume-results; the table shows the
# median drain rate and fetch and ack latencies, then the consumption
# targets.
set -euo pipefail

MODE=r1
if [[ $# -gt 0 ]]; then
	if [[ ($1 == r3 || $1 == consume) && $# == 1 ]]; then
		MODE=$1
	else
		# Everything else is set through the environment (see above).
		sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"
		[[ $1 == -h || $1 == --help ]] && exit 0
		echo "bench-peers: takes no argument but r3 or consume; set the variables above in the environment" >&2
		exit 2
	fi
fi

if [[ $MODE == r3 ]]; then
	DURATION=${DURATION:-15s}
	SYSTEMS=${SYSTEMS:-"herald herald-sync nats-always nats-default rabbitmq"}
	HERALD_SHARDS=${HERALD_SHARDS:-3}
fi
if [[ $MODE == consume ]]; then
	SYSTEMS=${SYSTEMS:-"herald herald-push nats-always nats-default rabbitmq"}
	HERALD_SHARDS=${HERALD_SHARDS:-11}
fi
BACKLOGS=${BACKLOGS:-"10000 100000 1000000"}
KEYS_LIST=${KEYS_LIST:-"40 1024"}
CONSUMERS=${CONSUMERS:-4}
CONSUME_BATCH=${CONSUME_BATCH:-100}
DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
PRODUCERS=${PRODUCERS:-64}
EVENT_BYTES=${EVENT_BYTES:-1024}
KEYS=${KEYS:-1024}
BATCHES=${BATCHES:-"1 100"}
SYSTEMS=${SYSTEMS:-"herald nats-always nats-default rabbitmq"}
HERALD_SHARDS=${HERALD_SHARDS:-"11 1"}
SNAPSHOT_ENTRIES=${SNAPSHOT_ENTRIES:-}
SNAPSHOT_BATCHES=${SNAPSHOT_BATCHES:-"1 500"}
# With batch 1, also run herald with the Go client's publish batching
# (concurrent producers share requests of up to this many events); 0: off.
HERALD_CLIENT_BATCHING=${HERALD_CLIENT_BATCHING:-500}
# With batch 1, also run herald over publish streams (one connection per
# node carrying every producer's calls, each answered on its own); 0: off.
HERALD_STREAM=${HERALD_STREAM:-1}
LOCK=${LOCK:-/tmp/herald-bench.lock}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/herald-bench}

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if [[ $MODE == r3 ]]; then
	OUT=${OUT:-$repo/docs/bench/r3-results}
elif [[ $MODE == consume ]]; then
	OUT=${OUT:-$repo/docs/bench/consume-results}
else
	OUT=${OUT:-$repo/docs/bench/peers-results}
fi

BENCH_NAME=bench-peers
. "$repo/scripts/bench-lib.sh"

tmp=$(mktemp -d /tmp/herald-bench-peers.XXXXXX)
pids=()
cleanup() {
	stop_pids
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_port PORT NAME PID: wait up to 60 s for 127.0.0.1:PORT to accept.
wait_port() {
	for _ in $(seq 600); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		kill -0 "$3" 2>/dev/null || die "$2 exited at startup; its log: $(tail -n 20 "$tmp/$2.log" 2>/dev/null)"
		sleep 0.1
	done
	die "$2 did not listen on 127.0.0.1:$1 within 60 s"
}

has() { [[ " $SYSTEMS " == *" $1 "* ]]; }

# --- build -------------------------------------------------------------------
log "building herald and the peer clients"
mkdir -p "$tmp/bin"
flock "$LOCK" go build -o "$tmp/bin/herald" ./cmd/herald
flock "$LOCK" go build -o "$tmp/bin/natsjs-bench" ./bench/cmd/natsjs-bench
flock "$LOCK" go build -o "$tmp/bin/rabbitmq-bench" ./bench/cmd/rabbitmq-bench
flock "$LOCK" go build -o "$tmp/bin/bench-table" ./bench/cmd/bench-table
herald_version="herald $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')"
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	herald_version+=" with uncommitted changes"
fi

# --- install what is missing -------------------------------------------------
# supports_sync BIN: does this nats-server accept sync_interval: always?
supports_sync() {
	printf 'listen: 127.0.0.1:1\njetstream { store_dir: "%s", sync_interval: always }\n' "$tmp/probe" > "$tmp/probe.conf"
	"$1" -c "$tmp/probe.conf" -t > /dev/null 2>&1
}
if has nats-always || has nats-default; then
	nats=${NATS_SERVER:-}
	if [[ -z $nats ]]; then
		for cand in "$(command -v nats-server || true)" "$CACHE/bin/nats-server"; do
			if [[ -n $cand && -x $cand ]] && supports_sync "$cand"; then
				nats=$cand
				break
			fi
		done
	fi
	if [[ -z $nats ]]; then
		log "no nats-server with sync_interval here (Debian's 2.9 lacks it): go install github.com/nats-io/nats-server/v2@latest into $CACHE/bin"
		mkdir -p "$CACHE/bin"
		(cd "$tmp" && GOBIN="$CACHE/bin" GOFLAGS= go install github.com/nats-io/nats-server/v2@latest)
		nats=$CACHE/bin/nats-server
	fi
	supports_sync "$nats" || die "$nats does not accept jetstream { sync_interval: always }"
	log "nats-server: $nats ($("$nats" --version))"
fi

rabbit_server=/usr/lib/rabbitmq/bin/rabbitmq-server
if has rabbitmq; then
	if [[ ! -x $rabbit_server ]]; then
		[[ $(id -u) == 0 ]] || die "rabbitmq-server is not installed; run: sudo apt-get install -y rabbitmq-server"
		log "installing rabbitmq-server with apt-get"
		# Keep the package from starting a node of its own (on all
		# interfaces): a temporary policy-rc.d refuses service starts.
		policy=
		if [[ ! -e /usr/sbin/policy-rc.d ]]; then
			policy=/usr/sbin/policy-rc.d
			printf '#!/bin/sh\nexit 101\n' > "$policy"
			chmod +x "$policy"
		fi
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server || true
		[[ -n $policy ]] && rm -f "$policy"
	fi
	[[ -x $rabbit_server ]] || die "no $rabbit_server after installing rabbitmq-server"
	command -v epmd > /dev/null || die "epmd (Erlang) not found"
fi

# --- R3: three-node clusters -------------------------------------------------
# start_herald_cluster NAME FLAG...: three herald serve processes, one
# cluster, with FLAGs; sets NAME_urls (the nodes' base URLs, comma-separated).
start_herald_cluster() {
	local name=$1 i ports=() spec=() urls=()
	shift
	for i in 1 2 3; do
		ports+=("$(free_port)")
		spec+=("$i=127.0.0.1:${ports[i - 1]}")
		urls+=("http://127.0.0.1:${ports[i - 1]}")
	done
	if [[ -n $SNAPSHOT_ENTRIES ]]; then
		set -- --snapshot-entries "$SNAPSHOT_ENTRIES" "$@"
	fi
	for i in 1 2 3; do
		"$tmp/bin/herald" serve --node-id "$i" --peers "$(join_by , "${spec[@]}")" \
			--listen "127.0.0.1:${ports[i - 1]}" --data-dir "$tmp/$name-$i" \
			--log-level warn "$@" > "$tmp/$name-$i.log" 2>&1 &
		pids+=($!)
	done
	for i in 1 2 3; do
		wait_port "${ports[i - 1]}" "$name-$i" "${pids[i - 4]}"
	done
	# A node answers once a majority of the cluster is up.
	for i in 1 2 3; do
		wait_herald_serves "$tmp/bin/herald" "${urls[i - 1]}" "$name-$i" "$tmp/$name-$i.log"
	done
	printf -v "${name//-/_}_urls" '%s' "$(join_by , "${urls[@]}")"
	printf -v "${name//-/_}_pids" '%s' "$(join_by , "${pids[@]: -3}")"
	log "$name: three nodes on 127.0.0.1:$(join_by , "${ports[@]}") (pids ${pids[*]: -3}), flags: $*"
}

# js_healthy URL: does the monitoring endpoint URL report JetStream healthy
# (in a cluster: in contact with a meta leader)?
js_healthy() {
	python3 -c 'import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/healthz", timeout=2).read()
except Exception:
    sys.exit(1)' "$1"
}

# start_nats_cluster NAME EXTRA: three JetStream servers routed into one
# cluster, EXTRA in their jetstream blocks; sets NAME_url (the client URLs,
# comma-separated) and NAME_mon (the first server's monitoring URL).
start_nats_cluster() {
	local name=$1 extra=$2 i ports=() mons=() routes=() urls=()
	for i in 1 2 3; do
		ports+=("$(free_port)")
		mons+=("$(free_port)")
		routes+=("$(free_port)")
		urls+=("nats://127.0.0.1:${ports[i - 1]}")
	done
	local route_urls=()
	for i in 1 2 3; do route_urls+=("nats-route://127.0.0.1:${routes[i - 1]}"); done
	for i in 1 2 3; do
		mkdir -p "$tmp/$name-$i"
		cat > "$tmp/$name-$i.conf" <<-CONF
			server_name: $name-$i
			listen: 127.0.0.1:${ports[i - 1]}
			http: 127.0.0.1:${mons[i - 1]}
			jetstream {
			  store_dir: "$tmp/$name-$i"
			  $extra
			}
			cluster {
			  name: $name
			  listen: 127.0.0.1:${routes[i - 1]}
			  routes: [$(join_by , "${route_urls[@]}")]
			}
		CONF
		"$nats" -c "$tmp/$name-$i.conf" > "$tmp/$name-$i.log" 2>&1 &
		pids+=($!)
	done
	for i in 1 2 3; do
		wait_port "${ports[i - 1]}" "$name-$i" "${pids[i - 4]}"
		for _ in $(seq 600); do
			js_healthy "http://127.0.0.1:${mons[i - 1]}" && break
			sleep 0.1
		done
		js_healthy "http://127.0.0.1:${mons[i - 1]}" ||
			die "$name-$i: JetStream not healthy within 60 s; its log: $(tail -n 20 "$tmp/$name-$i.log")"
	done
	printf -v "${name//-/_}_url" '%s' "$(join_by , "${urls[@]}")"
	printf -v "${name//-/_}_mon" 'http://127.0.0.1:%s' "${mons[0]}"
	printf -v "${name//-/_}_pids" '%s' "$(join_by , "${pids[@]: -3}")"
	log "$name: three nats-servers on 127.0.0.1:$(join_by , "${ports[@]}") (pids ${pids[*]: -3})"
}

# rabbit_env I: the environment of RabbitMQ node I of the cluster.
rabbit_env() {
	local r=$tmp/rabbitmq i=$1
	echo HOME="$r/home" ERL_EPMD_PORT="$rabbit_epmd_port" ERL_EPMD_ADDRESS=127.0.0.1 \
		RABBITMQ_NODENAME="herald-bench-$i@localhost" \
		RABBITMQ_CONF_ENV_FILE="$r/rabbitmq-env.conf" \
		RABBITMQ_CONFIG_FILE="$r/rabbitmq-$i.conf" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$r/enabled_plugins" \
		RABBITMQ_MNESIA_BASE="$r/mnesia-$i" RABBITMQ_LOG_BASE="$r/log-$i" \
		RABBITMQ_PID_FILE="$r/pid-$i" \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="${rabbit_ports[i - 1]}" \
		RABBITMQ_DIST_PORT="${rabbit_dist_ports[i - 1]}"
}

# rabbitmqctl I ARG...: rabbitmqctl against node I.
rabbitmqctl_on() {
	local i=$1
	shift
	# shellcheck disable=SC2046 # rabbit_env's words are NAME=value pairs
	env $(rabbit_env "$i") /usr/lib/rabbitmq/bin/rabbitmqctl -n "herald-bench-$i@localhost" "$@"
}

# beam_pid PIDFILE SCRIPT: the pid of the Erlang VM (beam.smp) that the
# rabbitmq-server script with pid SCRIPT started: the pid in PIDFILE if
# that is a beam.smp, else the beam.smp among SCRIPT's descendants. Its CPU
# time is the broker's.
beam_pid() {
	local pid
	pid=$(cat "$1" 2>/dev/null || true)
	if [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == beam.smp ]]; then
		echo "$pid"
		return
	fi
	local todo=("$2") p c
	while ((${#todo[@]})); do
		p=${todo[0]}
		todo=("${todo[@]:1}")
		if [[ $(cat "/proc/$p/comm" 2>/dev/null) == beam.smp ]]; then
			echo "$p"
			return
		fi
		for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do todo+=("$c"); done
	done
	die "no beam.smp process under the rabbitmq-server script (pid $2)"
}

# start_rabbitmq_cluster: three RabbitMQ nodes with one private epmd on
# loopback, nodes 2 and 3 joined to node 1; sets rabbit_url (the nodes'
# AMQP URLs, comma-separated).
start_rabbitmq_cluster() {
	local r=$tmp/rabbitmq i vm urls=()
	mkdir -p "$r/home"
	# One cookie for the three nodes and rabbitmqctl.
	python3 -c 'import secrets; print(secrets.token_hex(16).upper(), end="")' > "$r/home/.erlang.cookie"
	chmod 400 "$r/home/.erlang.cookie"
	echo '[].' > "$r/enabled_plugins"
	: > "$r/rabbitmq-env.conf"
	rabbit_epmd_port=$(free_port)
	rabbit_ports=() rabbit_dist_ports=()
	for i in 1 2 3; do
		rabbit_ports+=("$(free_port)")
		rabbit_dist_ports+=("$(free_port)")
		urls+=("amqp://guest:guest@127.0.0.1:${rabbit_ports[i - 1]}/")
		cat > "$r/rabbitmq-$i.conf" <<-CONF
			listeners.tcp.1 = 127.0.0.1:${rabbit_ports[i - 1]}
			loopback_users.guest = true
			disk_free_limit.absolute = 1GB
		CONF
	done
	epmd -address 127.0.0.1 -port "$rabbit_epmd_port" > "$tmp/epmd.log" 2>&1 &
	pids+=($!)
	wait_port "$rabbit_epmd_port" epmd $!
	local scripts=() beams=()
	for i in 1 2 3; do
		# shellcheck disable=SC2046
		env $(rabbit_env "$i") RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
			"$rabbit_server" > "$tmp/rabbitmq-$i.log" 2>&1 &
		pids+=($!)
		scripts+=($!)
	done
	for i in 1 2 3; do
		wait_port "${rabbit_ports[i - 1]}" "rabbitmq-$i" "${scripts[i - 1]}"
		# The script's erl replaces neither it nor its PID; stop the VM itself too.
		for _ in $(seq 100); do [[ -s $r/pid-$i ]] && break; sleep 0.1; done
		[[ -s $r/pid-$i ]] && pids+=("$(cat "$r/pid-$i")")
		beams+=("$(beam_pid "$r/pid-$i" "${scripts[i - 1]}")")
		[[ -n ${beams[-1]} ]] || die "rabbitmq-$i: no beam.smp process found"
	done
	for i in 2 3; do
		{
			rabbitmqctl_on "$i" stop_app
			rabbitmqctl_on "$i" join_cluster herald-bench-1@localhost
			rabbitmqctl_on "$i" start_app
		} >> "$tmp/rabbitmq-join.log" 2>&1 || die "rabbitmq-$i could not join the cluster: $(tail -n 20 "$tmp/rabbitmq-join.log")"
		wait_port "${rabbit_ports[i - 1]}" "rabbitmq-$i" "$(cat "$r/pid-$i")"
	done
	vm=$(rabbitmqctl_on 1 cluster_status --formatter json 2>/dev/null |
		python3 -c 'import json, sys; print(len(json.load(sys.stdin)["running_nodes"]))')
	[[ $vm == 3 ]] || die "the RabbitMQ cluster has $vm running nodes, not 3: $(rabbitmqctl_on 1 cluster_status 2>&1 | tail -n 20)"
	rabbit_url=$(join_by , "${urls[@]}")
	rabbit_pids=$(join_by , "${beams[@]}")
	log "rabbitmq: three nodes herald-bench-{1,2,3}@localhost on 127.0.0.1:$(join_by , "${rabbit_ports[@]}"), one cluster"
}

if [[ $MODE == r3 ]]; then
	if has herald; then start_herald_cluster herald; fi
	if has herald-sync; then
		export HERALD_BENCH_SYNC_SNAPSHOTS=1 # serve reads it: snapshots on the apply loop
		start_herald_cluster herald-sync
		unset HERALD_BENCH_SYNC_SNAPSHOTS
	fi
	if has nats-always; then start_nats_cluster nats-always "sync_interval: always"; fi
	if has nats-default; then start_nats_cluster nats-default ""; fi
	if has rabbitmq; then start_rabbitmq_cluster; fi
fi

# --- start the servers -------------------------------------------------------
if [[ $MODE != r3 ]] && { has herald || has herald-push; }; then
	herald_port=$(free_port)
	# --push-allow: herald-push delivers to the bench's receiver on loopback.
	"$tmp/bin/herald" serve --data-dir "$tmp/herald" --listen "127.0.0.1:$herald_port" \
		--push-allow 127.0.0.1/32 --log-level warn > "$tmp/herald.log" 2>&1 &
	pids+=($!)
	herald_pids=$!
	wait_port "$herald_port" herald $!
	log "herald serving on 127.0.0.1:$herald_port (pid ${pids[-1]})"
fi

# start_nats NAME EXTRA: a JetStream server with EXTRA in its jetstream block.
start_nats() {
	local name=$1 extra=$2 port mon
	port=$(free_port)
	mon=$(free_port)
	mkdir -p "$tmp/$name"
	cat > "$tmp/$name.conf" <<-EOF
		listen: 127.0.0.1:$port
		http: 127.0.0.1:$mon
		jetstream {
		  store_dir: "$tmp/$name"
		  $extra
		}
	EOF
	"$nats" -c "$tmp/$name.conf" > "$tmp/$name.log" 2>&1 &
	pids+=($!)
	wait_port "$port" "$name" $!
	wait_port "$mon" "$name" $!
	printf -v "${name//-/_}_url" 'nats://127.0.0.1:%s' "$port"
	printf -v "${name//-/_}_mon" 'http://127.0.0.1:%s' "$mon"
	printf -v "${name//-/_}_pids" '%s' "${pids[-1]}"
	log "$name serving on 127.0.0.1:$port, monitoring on 127.0.0.1:$mon (pid ${pids[-1]})"
}
if [[ $MODE != r3 ]] && has nats-always; then start_nats nats-always "sync_interval: always"; fi
if [[ $MODE != r3 ]] && has nats-default; then start_nats nats-default ""; fi

if [[ $MODE != r3 ]] && has rabbitmq; then
	r=$tmp/rabbitmq
	mkdir -p "$r/home"
	rabbit_port=$(free_port)
	dist_port=$(free_port)
	epmd_port=$(free_port)
	echo '[].' > "$r/enabled_plugins"
	: > "$r/rabbitmq-env.conf"
	cat > "$r/rabbitmq.conf" <<-EOF
		listeners.tcp.1 = 127.0.0.1:$rabbit_port
		loopback_users.guest = true
	EOF
	# A private epmd on loopback, so that nothing listens beyond 127.0.0.1.
	epmd -address 127.0.0.1 -port "$epmd_port" > "$tmp/epmd.log" 2>&1 &
	pids+=($!)
	wait_port "$epmd_port" epmd $!
	(
		export HOME=$r/home ERL_EPMD_PORT=$epmd_port ERL_EPMD_ADDRESS=127.0.0.1 \
			RABBITMQ_NODENAME=herald-bench@localhost \
			RABBITMQ_CONF_ENV_FILE=$r/rabbitmq-env.conf \
			RABBITMQ_CONFIG_FILE=$r/rabbitmq.conf \
			RABBITMQ_ENABLED_PLUGINS_FILE=$r/enabled_plugins \
			RABBITMQ_MNESIA_BASE=$r/mnesia RABBITMQ_LOG_BASE=$r/log \
			RABBITMQ_PID_FILE=$r/pid \
			RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$rabbit_port \
			RABBITMQ_DIST_PORT=$dist_port \
			RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
		exec "$rabbit_server"
	) > "$tmp/rabbitmq.log" 2>&1 &
	rabbit_sh=$!
	pids+=($rabbit_sh)
	wait_port "$rabbit_port" rabbitmq $rabbit_sh
	# The script's erl replaces neither it nor its PID; stop the VM itself too.
	for _ in $(seq 100); do [[ -s $r/pid ]] && break; sleep 0.1; done
	[[ -s $r/pid ]] && pids+=("$(cat "$r/pid")")
	rabbit_pids=$(beam_pid "$r/pid" "$rabbit_sh")
	[[ -n $rabbit_pids ]] || die "rabbitmq: no beam.smp process found"
	rabbit_url="amqp://guest:guest@127.0.0.1:$rabbit_port/"
	log "rabbitmq node herald-bench@localhost serving on 127.0.0.1:$rabbit_port (pids ${pids[*]: -2})"
fi

# --- run ---------------------------------------------------------------------
mkdir -p "$OUT/raw"
rm -f "$OUT"/raw/*.json

# print_result FILE: one line of a run's result, on stderr.
print_result() {
	python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); l = r["latency_ms"]; c = r.get("server_cpu"); print("  %.0f events/s, p50 %.2f ms, p99 %.2f ms, server CPU %s µs/event, errors %d" % (r["events_per_second"], l["p50"], l["p99"], "%.1f" % c["us_per_event"] if c else "?", r["errors"]))' "$1" >&2
}

# run_consume SYSTEM BACKLOG KEYS FILE: fill SYSTEM with a backlog of
# BACKLOG events with KEYS keys, drain it, and write the result to FILE.
run_consume() {
	local system=$1 backlog=$2 keys=$3 file=$4
	local flags=(--backlog "$backlog" --keys "$keys" --event-bytes "$EVENT_BYTES"
		--consumers "$CONSUMERS" --batch "$CONSUME_BATCH" --results "$file" --server-pids "$(server_pids "$system")")
	case $system in
	herald | herald-push)
		local mode=pull
		[[ $system == herald-push ]] && mode=push
		flock "$LOCK" "$tmp/bin/herald" bench consume --server "http://127.0.0.1:$herald_port" \
			--topic consume --shards "$HERALD_SHARDS" --mode "$mode" "${flags[@]}" > /dev/null
		;;
	nats-always)
		flock "$LOCK" "$tmp/bin/natsjs-bench" consume --url "$nats_always_url" --monitor "$nats_always_mon" \
			"${flags[@]}" > /dev/null
		;;
	nats-default)
		flock "$LOCK" "$tmp/bin/natsjs-bench" consume --url "$nats_default_url" --monitor "$nats_default_mon" \
			"${flags[@]}" > /dev/null
		;;
	rabbitmq)
		flock "$LOCK" "$tmp/bin/rabbitmq-bench" consume --url "$rabbit_url" "${flags[@]}" > /dev/null
		;;
	esac
}
# server_pids SYSTEM: the pids of SYSTEM's server processes (of its three
# nodes in r3 mode), comma-separated, for --server-pids.
server_pids() {
	case $1 in
	herald-sync:*) echo "$herald_sync_pids" ;;
	herald* | herald-push) echo "$herald_pids" ;;
	nats-always) echo "$nats_always_pids" ;;
	nats-default) echo "$nats_default_pids" ;;
	rabbitmq) echo "$rabbit_pids" ;;
	*) die "no server processes known for $1" ;;
	esac
}
load_flags=(--producers "$PRODUCERS" --event-bytes "$EVENT_BYTES" --keys "$KEYS"
	--duration "$DURATION" --warmup "$WARMUP")

# run_one SYSTEM BATCH FILE
run_one() {
	local system=$1 batch=$2 file=$3
	case $system in
	herald:* | herald-cb:* | herald-st:*)
		local extra=()
		[[ $system == herald-cb:* ]] && extra=(--client-batching "$HERALD_CLIENT_BATCHING")
		[[ $system == herald-st:* ]] && extra=(--stream)
		flock "$LOCK" "$tmp/bin/herald" bench publish --server "http://127.0.0.1:$herald_port" \
			--topic peers --fresh --shards "${system#*:}" "${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" \
			"${extra[@]}" --results "$file" > /dev/null
		"$tmp/bin/herald" --server "http://127.0.0.1:$herald_port" topic delete --force peers > /dev/null
		;;
	nats-always)
		flock "$LOCK" "$tmp/bin/natsjs-bench" --url "$nats_always_url" --monitor "$nats_always_mon" \
			"${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" --results "$file" > /dev/null
		;;
	nats-default)
		flock "$LOCK" "$tmp/bin/natsjs-bench" --url "$nats_default_url" --monitor "$nats_default_mon" \
			"${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" --results "$file" > /dev/null
		;;
	rabbitmq)
		flock "$LOCK" "$tmp/bin/rabbitmq-bench" --url "$rabbit_url" \
			"${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" --results "$file" > /dev/null
		;;
	esac
}

# run_one_r3 SYSTEM BATCH FILE: SYSTEM's three-node cluster, the producers
# taking its nodes in turn.
run_one_r3() {
	local system=$1 batch=$2 file=$3
	case $system in
	herald:* | herald-cb:* | herald-st:* | herald-rs:* | herald-sync:*)
		local cluster=${system%%:*} shards=${system#*:} urls=$herald_urls extra=() label
		label="R3, $shards shards, async snapshots"
		[[ $shards == 1 ]] && label="R3, 1 shard, async snapshots"
		if [[ $cluster == herald-sync ]]; then
			urls=$herald_sync_urls
			label=${label/async snapshots/sync snapshots}
		fi
		if [[ $cluster == herald-cb ]]; then
			extra=(--client-batching "$HERALD_CLIENT_BATCHING")
			label+=", client batching"
		fi
		if [[ $cluster == herald-st ]]; then
			extra=(--stream)
			label+=", publish stream"
		fi
		if [[ $cluster == herald-rs ]]; then
			extra=(--stream --leader-routing)
			label+=", publish stream, leader routing"
		fi
		flock "$LOCK" "$tmp/bin/herald" bench publish --server "${urls%%,*}" --through "${urls#*,}" \
			--topic peers --fresh --shards "$shards" "${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" \
			--label "$label" "${extra[@]}" --results "$file" > /dev/null
		"$tmp/bin/herald" --server "${urls%%,*}" topic delete --force peers > /dev/null
		;;
	nats-always)
		flock "$LOCK" "$tmp/bin/natsjs-bench" --url "$nats_always_url" --monitor "$nats_always_mon" \
			--replicas 3 "${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" --results "$file" > /dev/null
		;;
	nats-default)
		flock "$LOCK" "$tmp/bin/natsjs-bench" --url "$nats_default_url" --monitor "$nats_default_mon" \
			--replicas 3 "${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" --results "$file" > /dev/null
		;;
	rabbitmq)
		flock "$LOCK" "$tmp/bin/rabbitmq-bench" --url "$rabbit_url" \
			--replicas 3 "${load_flags[@]}" --batch "$batch" --server-pids "$(server_pids "$system")" --results "$file" > /dev/null
		;;
	esac
}

# order_round ROUND: sets order to the runs in ROUND's order: rotated each
# round and reversed every other round, so that no system always runs
# first or right after the same one.
order_round() {
	local round=$1 i n=${#runs[@]} rev=()
	order=()
	for ((i = 0; i < n; i++)); do
		order+=("${runs[(i + round - 1) % n]}")
	done
	if ((round % 2 == 0)); then
		for ((i = n - 1; i >= 0; i--)); do rev+=("${order[i]}"); done
		order=("${rev[@]}")
	fi
}

read -r -a systems <<< "$SYSTEMS"
read -r -a batches <<< "$BATCHES"
read -r -a snapshot_batches <<< "$SNAPSHOT_BATCHES"
runs=()
# The consume phase: each system at each backlog and key count.
if [[ $MODE == consume ]]; then
	for keys in $KEYS_LIST; do
		for backlog in $BACKLOGS; do
			for system in "${systems[@]}"; do runs+=("$system $backlog $keys"); done
		done
	done
	batches=() # no publish runs
fi
for batch in "${batches[@]}"; do
	for system in "${systems[@]}"; do
		if [[ $system == herald-sync ]]; then
			continue # below, at the snapshot batches
		elif [[ $system == herald ]]; then
			for shards in $HERALD_SHARDS; do
				runs+=("herald:$shards $batch")
				if [[ $batch == 1 && $HERALD_CLIENT_BATCHING != 0 ]]; then
					runs+=("herald-cb:$shards $batch")
				fi
				if [[ $batch == 1 && $HERALD_STREAM != 0 ]]; then
					runs+=("herald-st:$shards $batch")
					# In a cluster, also with the client sending each call
					# straight to its shard's leader.
					if [[ $MODE == r3 ]]; then runs+=("herald-rs:$shards $batch"); fi
				fi
			done
			# In a cluster, the routed stream also on one shard: one log
			# and one leader, the configuration of the peers' rows.
			if [[ $MODE == r3 && $batch == 1 && $HERALD_STREAM != 0 && " $HERALD_SHARDS " != *" 1 "* ]]; then
				runs+=("herald-rs:1 $batch")
			fi
		else
			runs+=("$system $batch")
		fi
	done
done
if [[ $MODE == r3 ]] && has herald-sync; then
	# The snapshots experiment: herald-sync against herald (async) at the
	# snapshot batches, those herald does not run already included.
	for batch in "${snapshot_batches[@]}"; do
		for shards in $HERALD_SHARDS; do
			runs+=("herald-sync:$shards $batch")
			if has herald && [[ " $BATCHES " != *" $batch "* ]]; then
				runs+=("herald:$shards $batch")
			fi
		done
	done
fi
log "${#runs[@]} runs per round, $ROUNDS rounds"
start=$(date +%s)
for ((round = 1; round <= ROUNDS; round++)); do
	order_round "$round"
	for item in "${order[@]}"; do
		if [[ $MODE == consume ]]; then
			read -r system backlog keys <<< "$item"
			file=$OUT/raw/$system-backlog$backlog-keys$keys-round$round.json
			log "round $round of $ROUNDS: $system, backlog $backlog, $keys keys"
			run_consume "$system" "$backlog" "$keys" "$file"
			print_result "$file"
			continue
		fi
		read -r system batch <<< "$item"
		file=$OUT/raw/${system/:/-}-batch$batch-round$round.json
		log "round $round of $ROUNDS: $system, batch $batch"
		if [[ $MODE == r3 ]]; then
			run_one_r3 "$system" "$batch" "$file"
		else
			run_one "$system" "$batch" "$file"
		fi
		print_result "$file"
	done
done
log "all runs took $(($(date +%s) - start)) s"

# --- report ------------------------------------------------------------------
{
	echo "Machine: $(nproc) cores ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr), data in $(df -T "$tmp" | awk 'NR == 2 {print $2}') on $(df "$tmp" | awk 'NR == 2 {print $1}')"
	versions=$herald_version
	if [[ -n ${nats:-} ]]; then versions+=", $("$nats" --version)"; fi
	if has rabbitmq; then versions+=", rabbitmq-server $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')"; fi
	echo "Versions: $versions"
	if [[ $MODE == consume ]]; then
		echo "Consume: backlogs of ${BACKLOGS// /, } $EVENT_BYTES-byte events, ${KEYS_LIST// /, } keys; $CONSUMERS consumers, batch $CONSUME_BATCH; herald: $HERALD_SHARDS shards; median of $ROUNDS rounds"
	else
		echo "Load: $PRODUCERS producers, $EVENT_BYTES-byte events, $KEYS keys, batches of ${BATCHES// /, }; $DURATION measured after $WARMUP warm-up; median of $ROUNDS rounds"
	fi
	echo
	if [[ $MODE != r3 ]]; then
		"$tmp/bin/bench-table" --summary "$OUT/summary.json" "$OUT"/raw/*.json
	else
		# Two tables: the peers at BATCHES, and the snapshots experiment.
		peers=() snaps=()
		for f in "$OUT"/raw/*.json; do
			name=${f##*/}
			batch=${name##*-batch}
			batch=${batch%%-*}
			if [[ $name != herald-sync-* && " $BATCHES " == *" $batch "* ]]; then
				peers+=("$f")
			fi
			if [[ ($name == herald-sync-* || $name == herald-[0-9]*) && " $SNAPSHOT_BATCHES " == *" $batch "* ]]; then
				snaps+=("$f")
			fi
		done
		echo "herald: three nodes, a snapshot every ${SNAPSHOT_ENTRIES:-10000 (the default)} entries; NATS: three servers, R3 stream; RabbitMQ: three nodes, quorum queue of 3 members; producers take the three nodes in turn"
		echo
		if ((${#peers[@]})); then
			"$tmp/bin/bench-table" --targets r3 --summary "$OUT/summary.json" "${peers[@]}"
			echo
		fi
		if ((${#snaps[@]})); then
			echo "Snapshots: herald R3 with snapshots on the apply loop (HERALD_BENCH_SYNC_SNAPSHOTS=1) vs background (async) snapshots, a snapshot every ${SNAPSHOT_ENTRIES:-10000} entries per shard, batches of ${SNAPSHOT_BATCHES// /, }"
			echo
			"$tmp/bin/bench-table" --targets snapshots --summary "$OUT/snapshots-summary.json" "${snaps[@]}"
		fi
	fi
} > "$OUT/table.md"
cat "$OUT/table.md"
if [[ $MODE == r3 ]]; then
	log "results in $OUT (table.md, summary.json, snapshots-summary.json, raw/); plots: python3 scripts/plot-bench.py --prefix r3 $OUT/summary.json; python3 scripts/plot-bench.py --prefix r3-snapshots $OUT/snapshots-summary.json"
elif [[ $MODE == consume ]]; then
	log "results in $OUT (table.md, summary.json, raw/)"
else
	log "results in $OUT (table.md, summary.json, raw/); plots: python3 scripts/plot-bench.py $OUT/summary.json"
fi
