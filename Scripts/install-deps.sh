#!/usr/bin/env bash
# Installs the system packages the build and the tests need, if missing, and bagit-python.
# (The browser test's own, chromium and selenium: Scripts/install-browser.sh.)
# Safe to run repeatedly: it only calls apt-get or pip when something is absent.
set -euo pipefail
needed=(libsqlite3-dev libarchive-dev libssl-dev libvips-dev openssl libarchive-tools zstd xz-utils python3 time
    unzip)
missing=()
for p in "${needed[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# bagit-python, the reference BagIt implementation the bundle interoperability tests run.
python3 -c 'import bagit' 2>/dev/null || python3 -m pip install --quiet bagit==1.9.0
