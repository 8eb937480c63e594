#!/usr/bin/env bash
# Installs the system packages the build and the tests need, if missing.
# Safe to run repeatedly: it only calls apt-get when something is absent.
set -euo pipefail
needed=(libsqlite3-dev libarchive-dev libarchive-tools zstd xz-utils python3 time)
missing=()
for p in "${needed[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
