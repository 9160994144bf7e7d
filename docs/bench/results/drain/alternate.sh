#!/bin/sh
# Alternates drains of two herald servers, one per build, under the
# shared lock: for each round, key count and backlog, one drain on A's
# server then one on B's. Usage: alternate.sh OUTDIR
#   A_BIN A_URL A_PID  B_BIN B_URL B_PID  ROUNDS
set -eu
out=$1
mkdir -p "$out"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for keys in 40 1024; do
    for backlog in 10000 100000; do
      for side in A B; do
        eval bin=\$${side}_BIN url=\$${side}_URL pid=\$${side}_PID
        f="$out/$side-r$r-k$keys-b$backlog"
        "$bin" bench consume --server "$url" --shards 11 --mode pull --backlog "$backlog" --keys "$keys" \
          --event-bytes 1024 --consumers 4 --batch 100 --server-pids "$pid" --results "$f.json" > "$f.txt" 2>&1
        printf '%s r%s keys %s backlog %s: %s\n' "$side" "$r" "$keys" "$backlog" \
          "$(grep -E 'throughput|server CPU' "$f.txt" | tr -s ' ' | cut -d' ' -f2,3,4 | tr '\n' ' ')"
      done
    done
  done
done
