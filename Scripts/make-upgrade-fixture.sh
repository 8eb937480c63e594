#!/bin/bash
# Makes the catalog a release leaves behind, as a fixture for the upgrade tests
# (Tests/AssetCatalogTests/UpgradeTests.swift): tags, metadata, archive members,
# succeeded, failed and queued jobs, and a removal committed by a command that died
# before removing the file.
#
#   Scripts/make-upgrade-fixture.sh ASSETCAT_BINARY OUTPUT_DIR
#
# Run it with the release's binary, a debug build of it (`swift build` at the release's
# tag): a release build of this version on reads no fault point (ASSETCAT_FAULT), and
# the removal below must die after its commit. OUTPUT_DIR must not exist.
set -euo pipefail
assetcat=$(realpath "$1")
output=$2
here=$(cd "$(dirname "$0")/.." && pwd)
[ ! -e "$output" ] || { echo "$output exists" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir src
cp -r "$here/TestAssets/demo/photos" src/
cp "$here/TestAssets/demo/notes.txt" "$here/TestAssets/demo/copy-a.txt" "$here/TestAssets/demo/copy-b.txt" src/
echo "will vanish" > src/gone.txt
echo "doomed content" > src/doomed.txt
c=catalog
"$assetcat" init $c
"$assetcat" add --catalog $c --tag photos --tag "2026 trip" src/photos/*
"$assetcat" add --catalog $c --tag docs src/notes.txt src/copy-a.txt src/copy-b.txt src/doomed.txt
"$assetcat" add --catalog $c --tag archives "$here/TestAssets/archives/sample.zip"
"$assetcat" add --catalog $c --reference --defer-hash src/gone.txt
rm src/gone.txt
"$assetcat" jobs run --catalog $c || true # the digest of gone.txt fails
"$assetcat" add --catalog $c --tag archives --tag queued "$here/TestAssets/archives/sample.tar.gz"
"$assetcat" tag --catalog $c notes.txt --add "unicode-é" --add important
# Dies after the deletion commits, before the file is removed (exit 86).
status=0
ASSETCAT_FAULT=after-commit "$assetcat" rm --catalog $c doomed.txt || status=$?
[ "$status" = 86 ] || { echo "the rm did not die after its commit (status $status): give a debug build" >&2; exit 1; }
# Fold the write-ahead log into the store (no catalog code runs: nothing is swept).
python3 -c 'import sqlite3; sqlite3.connect("catalog/catalog.sqlite").execute("PRAGMA wal_checkpoint(TRUNCATE)")'
rm -rf $c/catalog.sqlite-wal $c/catalog.sqlite-shm $c/staging
cp -r $c "$output"
