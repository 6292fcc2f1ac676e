#!/usr/bin/env bash
# Summarize results/*.jsonl: per peer/backend/mode, the median over CLEAN runs (no rustc/cargo process seen
# during the run) plus the min-max of those runs; contaminated runs are counted but left out.
#   bench/peers/summarize.sh [results/<date>.jsonl ...]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
files=("$@"); [[ ${#files[@]} -gt 0 ]] || files=("$HERE"/results/*.jsonl)
cat "${files[@]}" | jq -s -r '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
  def clean: (.rustc_busy_samples | split("/") | .[0] == "0");
  group_by([.peer, .backend, .mode])[] as $g
  | ($g | map(select(clean))) as $c
  | [$g[0].peer, $g[0].backend, $g[0].mode, $g[0].n,
     ($c | map(.submit_per_s) | med), ($c | map(.drain_per_s) | med),
     (($c | map(.drain_per_s) | min | tostring) + "-" + ($c | map(.drain_per_s) | max | tostring)),
     ($c | length), ($g | length)]
  | @tsv' | column -t -s $'\t' -N peer,backend,mode,n,submit_per_s_median,drain_per_s_median,drain_min-max,clean_runs,all_runs
