#!/usr/bin/env bash
# Installs what the browser test (Tests/Browser/browse.py) needs, if missing: Debian's
# chromium and chromium-driver, and selenium, which drives them.
#
#   Scripts/install-browser.sh               installs, in the foreground
#   Scripts/install-browser.sh --background  starts that install and returns (`make test`, once
#                                            the build's own packages are in: the download
#                                            overlaps the build and the Swift tests)
#   Scripts/install-browser.sh --wait        waits for a background install, then installs in
#                                            the foreground whatever is still missing (its
#                                            errors shown); the log of the background one is
#                                            .build/browser-deps/log
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."
state=.build/browser-deps

present() {
    for p in chromium chromium-driver; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 1
    done
    python3 -c 'import selenium' 2>/dev/null
}

install() {
    present && return 0
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # One apt at a time: Scripts/with-postgres.sh may install PostgreSQL meanwhile (same lock).
    $sudo flock /tmp/assetcat-apt.lock apt-get update -qq
    $sudo flock /tmp/assetcat-apt.lock apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
    python3 -c 'import selenium' 2>/dev/null || python3 -m pip install --quiet selenium==4.51.0
}

case "${1:-}" in
--background)
    present && exit 0
    mkdir -p "$state"
    nohup "$self" >"$state/log" 2>&1 &
    echo $! >"$state/pid"
    ;;
--wait)
    if [ -f "$state/pid" ]; then
        pid=$(cat "$state/pid")
        while kill -0 "$pid" 2>/dev/null; do sleep 1; done
        rm -f "$state/pid"
    fi
    install
    ;;
*) install ;;
esac
