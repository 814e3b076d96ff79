#!/usr/bin/env bash
# CRIU, for pausing container sandboxes to disk (docs/pause.md#containers-and-criu): kernels
# from 6.16 need criu 4.2 or newer, and Debian 12 ships 3.17. Unless a criu of 4.2 or newer is
# on PATH, this unpacks Debian's newest (sid's) with the libraries it needs, its C library and
# loader included, into a private prefix, and writes a wrapper that runs it there: the host's
# packages and apt sources are not touched. Best effort: without it, containers pause in
# memory only, and the orchestrator says why at start-up.
set -euo pipefail

prefix=${SBX_CRIU_PREFIX:-/var/lib/sandboxes/criu}
wrapper="$prefix/bin/criu"

recent_enough() { "$1" --version 2>/dev/null | awk '/^Version:/ { split($2, v, "."); exit !(v[1] > 4 || (v[1] == 4 && v[2] >= 2)) }'; }
if recent_enough "$wrapper" || { command -v criu >/dev/null && recent_enough criu; }; then
  exit 0
fi

echo "setup: criu 4.2 or newer (Debian sid's) into $prefix, for pausing containers to disk" >&2
work=$(mktemp -d)
trap 'rm -rf "$work" "$prefix.new"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo 'deb http://deb.debian.org/debian sid main' >"$work/sources.list"
: >"$work/status"
# An empty package status: apt resolves criu's whole dependency closure, and only downloads it.
apt_opts=(
  -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Dir::State::status=$work/status"
  -o Acquire::Languages=none -o "APT::Architectures=$(dpkg --print-architecture)" -o Debug::NoLocking=1 -o APT::Sandbox::User=root
)
apt-get "${apt_opts[@]}" update -qq
apt-get "${apt_opts[@]}" install --download-only --no-install-recommends -y -qq criu >/dev/null

mkdir -p "$prefix.new/root" "$prefix.new/bin"
for deb in "$work"/cache/archives/*.deb; do
  dpkg-deb -x "$deb" "$prefix.new/root"
done
cat >"$prefix.new/bin/criu" <<WRAPPER
#!/bin/sh
# criu from Debian sid, run by its own loader and libraries (scripts/setup-criu.sh).
root='$prefix/root'
exec "\$root/usr/lib64/ld-linux-x86-64.so.2" --library-path "\$root/usr/lib/x86_64-linux-gnu" "\$root/usr/sbin/criu" "\$@"
WRAPPER
chmod 755 "$prefix.new/bin/criu"
rm -rf "$prefix"
mv "$prefix.new" "$prefix"
recent_enough "$wrapper"
echo "setup: $("$wrapper" --version | head -1) in $prefix" >&2
