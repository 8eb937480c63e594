#!/usr/bin/env bash
# `make docs`: builds the DocC documentation of every library module with swift-docc-plugin,
# and fails if DocC warned (an unresolved symbol link, a missing article, …).
# The archives land in .build/plugins/Swift-DocC/outputs/<Module>.doccarchive.
set -euo pipefail
cd "$(dirname "$0")/.."
swift="${SWIFT:-swift}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for target in Persistence PersistencePostgreSQL ArchiveIO BagIt AssetCatalog CatalogServer; do
    "$swift" package generate-documentation --target "$target" 2>&1 | tee -a "$log"
done
# SwiftPM's notes on a dependency's own files (swift-distributed-tracing's CMakeLists.txt, which
# Hummingbird brings), and on the flags a system library's pkg-config gives (libvips's
# `-pthread`, which SwiftPM drops), are not ours, and not DocC's.
ours="$(grep 'warning:' "$log" | grep -v "file(s) which are unhandled; explicitly declare them as resources" \
    | grep -v "warning: prohibited flag(s): -pthread" || true)"
if [ -n "$ours" ]; then
    echo "error: DocC warned $(printf '%s\n' "$ours" | wc -l) time(s); see above" >&2
    exit 1
fi
echo "docs: Persistence, PersistencePostgreSQL, ArchiveIO, BagIt, AssetCatalog and CatalogServer built without warnings"
