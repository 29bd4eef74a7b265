#!/bin/bash
# Counts the instructions PostgreSQL runs for one iteration of each script
# of instructions/: a server process in single-user mode under Valgrind's
# callgrind, its statements read from standard input, no client, no other
# process, no clock. The count is the same from run to run (within a few
# hundred instructions in a million), where CPU seconds on a shared machine
# scatter by ±20 %: the way to compare two forms of a statement.
#
# A script's lines before `--> iteration` run once (its PREPAREs); the lines
# after it run ITERATIONS times, `{i}` replaced by the iteration's number
# and `{uuid}` by a new UUID. Each script runs twice, with FEW and with
# FEW + ITERATIONS iterations, and the difference divided by ITERATIONS is
# the figure: start-up, the PREPAREs and the shut-down cancel out.
#
# What it leaves out: the kernel's work (the WAL's writes and flushes, the
# socket of a client), and the protocol (single-user mode reads EXECUTE
# statements, whose parameters are expressions, where a client's Bind sends
# values). It counts what the statements themselves cost PostgreSQL.
#
# PGDATA names a data folder used by nothing else, its server stopped
# (single-user mode refuses a running one), with migrations/sql/*.sql, and
# instructions-seed.sql for the replay scripts, applied in database PGDATABASE; the
# lean floor's script needs its table too (LEAN_TABLE in
# bench-app/lean-keys.ts). Run as the data folder's owner, or as root
# (then as PGUSER_OS, postgres unless told).
#   PGDATA=/path/to/data ./instructions.sh instructions/module.sql instructions/lean.sql
set -euo pipefail
: "${PGDATA:?names the data folder of a stopped PostgreSQL server used by nothing else}"
DB=${PGDATABASE:-perf}
FEW=${FEW:-200}
ITERATIONS=${ITERATIONS:-1000}
POSTGRES=${POSTGRES:-$(pg_config --bindir)/postgres}
command -v valgrind >/dev/null || {
  echo 'valgrind is not installed (apt-get install valgrind)' >&2
  exit 2
}
work=$(mktemp -d)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

# The script `$1` with `$2` iterations, on standard output.
expand() {
  awk -v n="$2" -v seed="$RANDOM$RANDOM" '
    BEGIN { srand(seed) }
    /^--> iteration/ { body = 1; next }
    /^--/ { next }
    !body { print; next }
    { lines[++count] = $0 }
    END {
      for (i = 1; i <= n; i++) {
        uuid = sprintf("%08x-%04x-4%03x-a%03x-%06x%06x", rand() * 4294967295,
          rand() * 65535, rand() * 4095, rand() * 4095, rand() * 16777215,
          rand() * 16777215)
        for (l = 1; l <= count; l++) {
          line = lines[l]
          gsub(/\{i\}/, prefix i, line)
          gsub(/\{uuid\}/, uuid, line)
          print line
        }
      }
    }' prefix="$(date +%s%N)-" "$1"
}

# Instructions of one single-user run of the file `$1`.
count() {
  local run=(valgrind --tool=callgrind --callgrind-out-file=/dev/null
    "$POSTGRES" --single -D "$PGDATA" "$DB")
  if [ "$(id -u)" = 0 ]; then
    su "${PGUSER_OS:-postgres}" -c "${run[*]} < $1" 2>&1 >/dev/null
  else
    "${run[@]}" <"$1" 2>&1 >/dev/null
  fi | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

echo "PostgreSQL's instructions an iteration ($ITERATIONS iterations):"
for script in "$@"; do
  expand "$script" "$FEW" >"$work/few.sql"
  expand "$script" $((FEW + ITERATIONS)) >"$work/many.sql"
  chmod 644 "$work"/*.sql
  few=$(count "$work/few.sql")
  many=$(count "$work/many.sql")
  echo "  $script: $(((many - few) / ITERATIONS))"
done
