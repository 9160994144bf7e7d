#!/usr/bin/env bash
# herald alone: pull drain at backlogs of 10,000, 100,000 and 1,000,000, 40 and 1,024 keys, 3 rounds.
set -u
B=/tmp/herald-m; T=/tmp/flat; rm -rf $T; mkdir -p $T
$B serve --data-dir $T/d --listen 127.0.0.1:27650 --log-level warn > $T/serve.log 2>&1 &
pid=$!
for _ in $(seq 100); do $B --server http://127.0.0.1:27650 topic list >/dev/null 2>&1 && break; sleep 0.1; done
for r in 1 2 3; do
  for k in 40 1024; do
    for b in 10000 100000 1000000; do
      echo -n "round $r keys $k backlog $b: "
      $B --server http://127.0.0.1:27650 bench consume --shards 11 --mode pull --backlog $b --keys $k --event-bytes 1024 --consumers 4 --batch 100 --server-pids $pid --timeout 10m 2>&1 | grep -E "^drain|events/s|server CPU" | tr '\n' ' '
      echo
    done
  done
done
kill $pid; wait $pid
