#!/usr/bin/env bash
# Reference Python onestep burn-down.  Usage: run_python_reference.sh [postgres|mariadb] [n=20000]
exec "$(dirname "${BASH_SOURCE[0]}")/run.sh" reference "${1:-postgres}" "${2:-20000}"
