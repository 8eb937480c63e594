#!/usr/bin/env bash
# `make install-check`: installs into a temporary directory (DESTDIR), then checks that
# every installed file is there and is what it should be. Removes the directory after.
set -euo pipefail
cd "$(dirname "$0")/.."
configuration="$1"
prefix="$2"
destdir="$(mktemp -d /tmp/assetcat-install.XXXXXX)"
trap 'rm -rf "$destdir"' EXIT
Scripts/install.sh "$configuration" "$destdir$prefix"
root="$destdir$prefix"
fail() { echo "install-check: $*" >&2; exit 1; }
"$root/bin/assetcat" --version | head -n 1 | grep -qx 'assetcat [0-9.]*' || fail "bin/assetcat --version"
man="$root/share/man/man1/assetcat.1"
grep -q '^\.Dt ASSETCAT 1' "$man" || fail "$man is not assetcat's man page"
for command in init add ls show cat rm tag verify gc stats jobs export import validate recover; do
    grep -q "$command" "$man" || fail "$man does not mention $command"
done
bash -n "$root/share/bash-completion/completions/assetcat" || fail "the bash completion does not parse"
grep -q 'complete .*assetcat' "$root/share/bash-completion/completions/assetcat" || fail "no bash completion"
grep -q '^#compdef assetcat' "$root/share/zsh/site-functions/_assetcat" || fail "no zsh completion"
grep -q "complete -c 'assetcat'" "$root/share/fish/vendor_completions.d/assetcat.fish" || fail "no fish completion"
echo "install-check: bin/assetcat, its man page and bash, zsh and fish completions are installed under $prefix"
