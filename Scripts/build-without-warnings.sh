#!/usr/bin/env bash
# Runs a build command (its output passes through), then fails if the compiler warned about
# a file of ours: Sources/ or Tests/. Dependencies' warnings are theirs, and not counted.
# Used by `make test`, so CI's clean build is also the warnings check (no second build).
# An incremental build only shows the warnings of the files it recompiles: a clean build
# (`rm -rf .build` or CI's fresh clone) shows them all.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
ours="$(grep -E "^$root/(Sources|Tests)/[^:]+:[0-9]+:([0-9]+:)? warning:" "$log" | sort -u || true)"
if [ -n "$ours" ]; then
    count="$(printf '%s\n' "$ours" | wc -l)"
    printf '\nerror: the build warned %s time(s) about our own code; fix every warning:\n%s\n' "$count" "$ours" >&2
    exit 1
fi
