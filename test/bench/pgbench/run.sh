#!/bin/bash
# Runs pgbench scripts in turn, ROUNDS times (interleaved), and prints each
# one's PostgreSQL CPU a transaction: user + system time of the whole
# server (its postmaster, the backends it reaped, its other processes) over
# the run, from /proc, divided by the transactions. The server must be one
# of its own (nothing else using it): PGDATA names its data folder.
#   PGDATA=/path/to/data PGPORT=5499 ROUNDS=5 SECONDS_EACH=6 ./run.sh claim-*.sql
set -euo pipefail
: "${PGDATA:?names the data folder of a PostgreSQL server used by nothing else}"
ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-6}
DB=${PGDATABASE:-perf}
ticks() {
  local pm t=0 x
  pm=$(head -1 "$PGDATA/postmaster.pid")
  for x in $(cut -d' ' -f14-17 "/proc/$pm/stat"); do t=$((t + x)); done
  for p in $(pgrep -P "$pm"); do
    for x in $(cut -d' ' -f14,15 "/proc/$p/stat" 2>/dev/null); do t=$((t + x)); done
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)
declare -A figures
for round in $(seq "$ROUNDS"); do
  for script in "$@"; do
    before=$(ticks)
    out=$(pgbench -n -M prepared -c 8 -j 2 -T "$SECONDS_EACH" -f "$script" "$DB" 2>&1)
    sleep 0.3 # the backends exit and are reaped
    after=$(ticks)
    tx=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
    figures[$script]="${figures[$script]:-} $(( (after - before) * 1000000 / hz / tx ))"
  done
done
echo "PostgreSQL CPU a transaction (µs), one figure a round:"
for script in "$@"; do
  echo "  $script:${figures[$script]}"
done
