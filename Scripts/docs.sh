#!/usr/bin/env bash
# `make docs`: builds the DocC documentation of every library module with swift-docc-plugin,
# and fails if DocC warned (an unresolved symbol link, a missing article, …).
# The archives land in .build/plugins/Swift-DocC/outputs/<Module>.doccarchive.
set -euo pipefail
cd "$(dirname "$0")/.."
swift="${SWIFT:-swift}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for target in Persistence PersistencePostgreSQL ArchiveIO BagIt AssetCatalog; do
    "$swift" package generate-documentation --target "$target" 2>&1 | tee -a "$log"
done
if grep -q 'warning:' "$log"; then
    echo "error: DocC warned $(grep -c 'warning:' "$log") time(s); see above" >&2
    exit 1
fi
echo "docs: Persistence, PersistencePostgreSQL, ArchiveIO, BagIt and AssetCatalog built without warnings"
