#!/usr/bin/env bash
# `make demo`: the catalog's main job, on a catalog made in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
# The debug build: only it reads the test switches (ASSETCAT_FAULT, used below to kill a command).
bin="$(swift build --show-bin-path)/assetcat"
work="$(mktemp -d /tmp/assetcat-demo.XXXXXX)"
catalog="$work/.assetcat"
export ASSETCAT_CATALOG="$catalog"
step() { printf '\n== %s\n' "$*"; }
run() { printf '$ assetcat %s\n' "$*"; "$bin" "$@"; }

step "Create a catalog"
run init "$catalog"

step "Add files (copied into objects/, identical content stored once) and archives"
run add --recursive --tag demo TestAssets/demo
run add TestAssets/archives/sample.tar.gz
run add --reference --tag outside TestAssets/archives/sample.zip

step "Each add ran the jobs it queued before returning: archive indexing and image metadata"
run jobs

step "List, show, read an archive member"
run ls
run show notes.txt
member=$("$bin" ls --json | python3 -c 'import json,sys; print(next(a["id"] for a in json.load(sys.stdin) if a["storage"]=="member"))')
run cat "$member" | head -c 200; echo

step "Verify every asset's content against its SHA-256"
run verify
run stats

step "Delete an asset whose content another asset shares: the file stays"
run rm copy-a.txt
digest=$("$bin" show copy-b.txt --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha256"])')
object="$catalog/objects/${digest:0:2}/${digest:2}"
ls -l "$object"

step "Delete the last user, but kill assetcat right after the commit (before the file is removed)"
printf '$ ASSETCAT_FAULT=after-commit assetcat rm copy-b.txt\n'
ASSETCAT_FAULT=after-commit "$bin" rm copy-b.txt || echo "(assetcat died with status $?, as asked)"
echo "the record is gone, the file is still there — a removal is journaled, not done:"
ls -l "$object"

step "The next open finishes the journaled removal"
run ls --tag demo
if [ -e "$object" ]; then echo "unexpected: $object still exists"; exit 1; else echo "$object is gone"; fi
run gc

step "Export the catalog as a BagIt bundle, validate it, import it into a second catalog"
bundle="$work/demo-bundle.tar.zst"
run export "$bundle"
run validate "$bundle"
second="$work/second.assetcat"
"$bin" init "$second" >/dev/null
printf '$ assetcat import --catalog %s %s\n' "$second" "$bundle"
ASSETCAT_CATALOG="$second" "$bin" import "$bundle"
ASSETCAT_CATALOG="$second" "$bin" ls

printf '\nThe demo catalog is in %s\n' "$catalog"
