#!/usr/bin/env bash
# Runs the whole peer set REPS times (default 3) and appends the JSON lines to results/<UTC date>.jsonl.
#   bench/peers/run_all.sh [reps=3] [n_reference=2000] [n_graphile=20000]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPS="${1:-3}"; NREF="${2:-2000}"; NGR="${3:-20000}"
mkdir -p "$HERE/results"; LOG="$HERE/results/$(date -u +%Y-%m-%d).jsonl"
for rep in $(seq 1 "$REPS"); do
  "$HERE/run_graphile.sh" default "$NGR"        | tee -a "$LOG"
  "$HERE/run_graphile.sh" batch "$NGR"          | tee -a "$LOG"
  "$HERE/run_python_reference.sh" postgres "$NREF" | tee -a "$LOG"
  "$HERE/run_python_reference.sh" mariadb "$NREF"  | tee -a "$LOG"
done
