#!/usr/bin/env bash
# Builds and runs the whole test suite under AddressSanitizer, then (unless --asan-only)
# under ThreadSanitizer. Fails on any report, from the test process or from a process it
# started (the assetcat CLI, the persistence fixture): every report is written to a log
# file of its own, and one file is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
sanitizers=(address thread)
[ "${1:-}" = "--asan-only" ] && sanitizers=(address)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
status=0
for sanitizer in "${sanitizers[@]}"; do
    scratch=.build-${sanitizer:0:1}san  # .build-asan, .build-tsan
    echo "== $sanitizer sanitizer: building" >&2
    "$SWIFT" build --build-tests --sanitize="$sanitizer" --scratch-path "$scratch"
    echo "== $sanitizer sanitizer: testing" >&2
    rm -f "$logs"/report.*
    # Leaks are not checked: the only ones found are XCTest's own.
    export ASAN_OPTIONS="detect_leaks=0:log_path=$logs/report:suppressions=$PWD/Scripts/sanitizers/asan.supp"
    export TSAN_OPTIONS="log_path=$logs/report"
    if ! "$SWIFT" test --skip-build --sanitize="$sanitizer" --scratch-path "$scratch"; then
        echo "== $sanitizer sanitizer: the suite failed" >&2
        status=1
    fi
    unset ASAN_OPTIONS TSAN_OPTIONS
    if compgen -G "$logs/report.*" >/dev/null; then
        echo "== $sanitizer sanitizer: reports" >&2
        cat "$logs"/report.* >&2
        status=1
    else
        echo "== $sanitizer sanitizer: no report" >&2
    fi
done
exit $status
