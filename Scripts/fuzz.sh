#!/usr/bin/env bash
# Builds the libFuzzer targets of Fuzz/ (AddressSanitizer + libFuzzer) and runs each for
# FUZZ_SECONDS (default 1800), one after the other (all at once with FUZZ_PARALLEL=1, as CI
# runs them), from the seed corpus in Fuzz/corpus/.
# What a run adds to the corpus goes to Fuzz/work/<target>/ (kept between runs, not
# committed); a crash, hang, leak or sanitizer report is written to Fuzz/crashes/<target>/
# and fails the run, after the other targets have had their turn.
#
#   FUZZ_SECONDS=60 ./Scripts/fuzz.sh                 every target for a minute
#   FUZZ_TARGETS="fuzz-records" ./Scripts/fuzz.sh     one target
#   FUZZ_NICE=19 ./Scripts/fuzz.sh                    on a machine others share
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
seconds=${FUZZ_SECONDS:-1800}
nice=${FUZZ_NICE:-0}
# Each target with the longest input worth trying: a line-based tag file or manifest of a
# few dozen lines; a records file of a few entries; a few dozen archive members.
declare -A max_len=(
    [fuzz-bag-tagfiles]=4096
    [fuzz-bag-manifest]=8192
    [fuzz-bag-fetch]=4096
    [fuzz-records]=16384
    [fuzz-extraction-guard]=4096
)
targets=${FUZZ_TARGETS:-fuzz-bag-tagfiles fuzz-bag-manifest fuzz-bag-fetch fuzz-records fuzz-extraction-guard}

echo "== fuzz: building" >&2
# `--sanitize=fuzzer` makes SwiftPM link libFuzzer's `main` (not the target's own) and
# instruments C code for coverage; `-Xswiftc -sanitize=fuzzer,address` gives swiftc both
# sanitizers in one flag, after SwiftPM's: swiftc keeps only the last `-sanitize` flag, so
# SwiftPM's `--sanitize=fuzzer --sanitize=address` leaves the Swift code without coverage
# counters (libFuzzer then fuzzes blind). C code (BoringSSL of swift-crypto, shims) gets no
# AddressSanitizer: it is not what is fuzzed.
flags=(--package-path Fuzz --sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address)
"$SWIFT" build "${flags[@]}"
bin=$("$SWIFT" build "${flags[@]}" --show-bin-path)

# A finding is libFuzzer's to report: Swift's backtracer, run inside AddressSanitizer,
# only adds reports of its own.
export SWIFT_BACKTRACE=enable=no
# AddressSanitizer holds freed memory back (256 MB by default) to catch its reuse: with a
# 16 MB quarantine, -rss_limit_mb=200 measures what the parser itself holds.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16}
run() {
    local target=$1
    local work=Fuzz/work/$target
    local crashes=Fuzz/crashes/$target
    mkdir -p "$work" "$crashes"
    echo "== fuzz: $target for $seconds s" >&2
    # -rss_limit_mb=200: our limit for peak memory, whatever the input (AddressSanitizer's
    # own use included). -timeout=10: one input taking longer is a hang.
    if ! nice -n "$nice" "$bin/$target" -max_total_time="$seconds" -max_len="${max_len[$target]}" \
        -rss_limit_mb=200 -timeout=10 -print_final_stats=1 -artifact_prefix="$crashes/" \
        "$work" "Fuzz/corpus/$target"; then
        echo "== fuzz: $target failed; its input is in $crashes/" >&2
        return 1
    fi
}
status=0
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
    pids=()
    for target in $targets; do
        run "$target" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
else
    for target in $targets; do run "$target" || status=1; done
fi
exit $status
