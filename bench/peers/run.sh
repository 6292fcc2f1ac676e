#!/usr/bin/env bash
# Peer burn-down for the side-by-side benchmark (issue 7): submit N, then drain with ONE worker process.
#
#   bench/peers/run.sh <peer> <backend> [n] [mode]
#     peer    reference | graphile
#     backend postgres | mariadb          (graphile: postgres only)
#     n       default 20000
#     mode    graphile: default | batch   (batch = localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0)
#             reference: ignored (always one-by-one submit with idempotency key)
#
# Prints ONE JSON line on stdout: {"peer","backend","mode","n","submit_per_s","drain_per_s", ...extras}.
# Extras: durations, /proc/loadavg before/after, settings, and how busy the machine's Rust build was
# (rustc_busy_samples = seconds in which a process named rustc, cargo or cargo-nextest existed / seconds
# sampled during the run; rustc_procs_at_start counts those processes when the run started).
#
# Environment (defaults):
#   PG_URL=postgres://postgres@127.0.0.1:5432/test     MARIADB_URL=mysql+asyncmy://root@127.0.0.1:3306/test
#   VENV=<repo>/.venv-ref (onestep==1.15.0, onestep-sql[postgres,mysql]==0.7.1)
#   WAIT_FOR_IDLE=1 QUIET_S=30 WAIT_MAX_S=900  wait (at most WAIT_MAX_S) for QUIET_S consecutive seconds
#                                     without a rustc/cargo/cargo-nextest process,
#   LOAD_MAX=1.0 LOAD_WAIT_MAX_S=120  then until the 1-min load average is < LOAD_MAX (at most LOAD_WAIT_MAX_S)
#   CONCURRENCY / BATCH_SIZE / POLL_INTERVAL_S (reference) and CONCURRENCY / POLL_INTERVAL (graphile) override
#   the worker settings; the defaults are the shared scripts' settings.
#
# Everything a run creates (reference: tables peerbench_<id>_executions/_attempts; graphile: schema
# graphile_peerbench_<id>) is dropped by the script itself and, as a fallback, by this wrapper's EXIT trap.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEER="${1:?usage: run.sh <reference|graphile> <postgres|mariadb> [n] [mode]}"
BACKEND="${2:?usage: run.sh <reference|graphile> <postgres|mariadb> [n] [mode]}"
N="${3:-20000}"
MODE="${4:-default}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432/test}"
MARIADB_URL="${MARIADB_URL:-mysql+asyncmy://root@127.0.0.1:3306/test}"
VENV="${VENV:-$REPO/.venv-ref}"
WAIT_FOR_IDLE="${WAIT_FOR_IDLE:-1}"
WAIT_MAX_S="${WAIT_MAX_S:-900}"
QUIET_S="${QUIET_S:-30}"
LOAD_MAX="${LOAD_MAX:-1.0}"
LOAD_WAIT_MAX_S="${LOAD_WAIT_MAX_S:-120}"

export BENCH_RUN_ID="$(head -c5 /dev/urandom | od -An -tx1 | tr -d ' \n')"
mkdir -p "$HERE/.tmp"
SAMPLES="$HERE/.tmp/$BENCH_RUN_ID.samples"; OUT="$HERE/.tmp/$BENCH_RUN_ID.out"; : >"$SAMPLES"
SAMPLER_PID=""; CHILD_PID=""

# psql / mysql CLI connection pieces for the fallback cleanup
pg_psql() { psql "$PG_URL" -v ON_ERROR_STOP=1 -qAtc "$1"; }
maria_sql() {
  local rest="${MARIADB_URL#*://}" ; local userhost="${rest%%/*}" ; local db="${rest#*/}"
  local user="${userhost%%@*}" ; local hostport="${userhost#*@}"
  mysql -h "${hostport%%:*}" -P "${hostport##*:}" -u "$user" "${db%%\?*}" -Ne "$1"
}

cleanup() {
  [[ -n "$SAMPLER_PID" ]] && kill "$SAMPLER_PID" 2>/dev/null || true
  if [[ -n "$CHILD_PID" ]] && kill -0 "$CHILD_PID" 2>/dev/null; then
    kill "$CHILD_PID" 2>/dev/null || true; wait "$CHILD_PID" 2>/dev/null || true
  fi
  rm -f "$SAMPLES" "$OUT"; rmdir "$HERE/.tmp" 2>/dev/null || true
  case "$PEER/$BACKEND" in
    reference/postgres)
      pg_psql "DROP TABLE IF EXISTS peerbench_${BENCH_RUN_ID}_attempts; DROP TABLE IF EXISTS peerbench_${BENCH_RUN_ID}_executions;" >/dev/null 2>&1 || true ;;
    reference/mariadb)
      maria_sql "DROP TABLE IF EXISTS peerbench_${BENCH_RUN_ID}_attempts; DROP TABLE IF EXISTS peerbench_${BENCH_RUN_ID}_executions;" >/dev/null 2>&1 || true ;;
    graphile/postgres)
      pg_psql "DROP SCHEMA IF EXISTS graphile_peerbench_${BENCH_RUN_ID} CASCADE;" >/dev/null 2>&1 || true ;;
  esac
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM

rustc_busy() { pgrep -x rustc >/dev/null 2>&1 || pgrep -x cargo >/dev/null 2>&1 || pgrep -x cargo-nextest >/dev/null 2>&1; }

waited=0
if [[ "$WAIT_FOR_IDLE" == 1 ]]; then
  # need QUIET_S consecutive seconds without rustc/cargo (builds come in bursts with short gaps), at most WAIT_MAX_S
  quiet=0
  while (( quiet < QUIET_S && waited < WAIT_MAX_S )); do
    if rustc_busy; then quiet=0; else quiet=$((quiet + 1)); fi
    sleep 1; waited=$((waited + 1))
  done
  # then let the 1-minute load average settle below LOAD_MAX (at most LOAD_WAIT_MAX_S more)
  lw=0
  while awk -v m="$LOAD_MAX" '{exit !($1 >= m)}' /proc/loadavg && (( lw < LOAD_WAIT_MAX_S )) && ! rustc_busy; do
    sleep 1; lw=$((lw + 1)); waited=$((waited + 1))
  done
fi
rustc_at_start=$( { pgrep -x rustc; pgrep -x cargo; pgrep -x cargo-nextest; } 2>/dev/null | wc -l || true)

# one sample per second: 1 if a rustc/cargo process exists
( while :; do if rustc_busy; then echo 1; else echo 0; fi; sleep 1; done ) >>"$SAMPLES" &
SAMPLER_PID=$!

case "$PEER/$BACKEND" in
  reference/postgres)
    DSN="postgresql+psycopg://${PG_URL#*://}" BACKEND=postgres "$VENV/bin/python" "$HERE/py_onestep_bench.py" "$N" >"$OUT" & ;;
  reference/mariadb)
    DSN="$MARIADB_URL" BACKEND=mysql "$VENV/bin/python" "$HERE/py_onestep_bench.py" "$N" >"$OUT" & ;;
  graphile/postgres)
    [[ -d "$HERE/node_modules/graphile-worker" ]] || (cd "$HERE" && npm ci --silent)
    (cd "$HERE" && DATABASE_URL="$PG_URL" exec node graphile_bench.mjs "$N" "$MODE") >"$OUT" & ;;
  graphile/mariadb)
    echo "graphile-worker supports PostgreSQL only" >&2; exit 2 ;;
  *)
    echo "unknown peer/backend: $PEER/$BACKEND" >&2; exit 2 ;;
esac
CHILD_PID=$!
wait "$CHILD_PID"; CHILD_PID=""
out="$(cat "$OUT")"

kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=""
busy=$(grep -c 1 "$SAMPLES" || true); total=$(wc -l <"$SAMPLES")
echo "$out" | jq -c --arg busy "$busy/$total" --argjson waited "$waited" --argjson at_start "$rustc_at_start" \
  '. + {rustc_procs_at_start: $at_start, rustc_busy_samples: $busy, waited_for_idle_s: $waited}'
