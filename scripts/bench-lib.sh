# bench-lib.sh: what the benchmark scripts share. Source it after setting
# BENCH_NAME (the prefix of log lines); the script keeps the server pids
# it starts in the array pids, and its scratch directory in tmp.

log() { printf '%s %s: %s\n' "$(date +%H:%M:%S)" "$BENCH_NAME" "$*" >&2; }
die() { log "$*"; exit 1; }

# stop_pids: SIGTERM every process in pids, give each up to 30 s to stop,
# then SIGKILL it.
stop_pids() {
	local pid
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		for _ in $(seq 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
}

# free_port: a TCP port of 127.0.0.1 free at the moment.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# join_by SEP WORD...: the words joined by SEP.
join_by() {
	local IFS=$1
	shift
	echo "$*"
}

# wait_herald_serves BINARY URL NAME LOG [PID]: wait up to a minute for the
# herald node at URL to answer (a cluster's node answers once a majority is
# up); die with the end of LOG if it does not, or at once if process PID,
# when given, exits first.
wait_herald_serves() {
	local bin=$1 url=$2 name=$3 logfile=$4 pid=${5:-}
	for _ in $(seq 600); do
		"$bin" --server "$url" topic list > /dev/null 2>&1 && return
		[[ -z $pid ]] || kill -0 "$pid" 2>/dev/null || die "$name exited: $(tail -n 20 "$logfile")"
		sleep 0.1
	done
	"$bin" --server "$url" topic list > /dev/null ||
		die "$name does not serve; its log: $(tail -n 20 "$logfile")"
}
