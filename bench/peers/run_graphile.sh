#!/usr/bin/env bash
# graphile-worker burn-down on PostgreSQL.  Usage: run_graphile.sh [default|batch] [n=20000]
exec "$(dirname "${BASH_SOURCE[0]}")/run.sh" graphile postgres "${2:-20000}" "${1:-default}"
