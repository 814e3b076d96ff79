#!/usr/bin/env bash
# Sets up everything the orchestrator needs on a Debian 12 host, idempotently:
# system packages, npm dependencies, the TypeScript build and the guest images (cached).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root (sandboxes need network namespaces, mounts and runc): sudo $0" >&2
  exit 1
fi

# Host tools: runc runs the sandboxes, debootstrap builds the guest image, iproute2 makes
# their networks, util-linux/mount mount their overlays, openssh-client is the benchmark's
# "naive" baseline, e2fsprogs builds config drives and VM disks, qemu-system-x86 runs the
# qemu runtime's microVMs and qemu-utils (qemu-img) makes their per-session disks, lz4
# unpacks Debian's kernel into the vmlinux Firecracker boots. The VM kernel and the
# initrd's busybox come from the guest image's own mirror, not the host.
# nftables (nft) enforces the guest network policy (src/network/policy/). curl is the
# hostile-client tests' HTTP client (it reads an early 413 as a real client does).
# python3 makes the container runtime's idmapped mounts (ctypes; idmapped-mount.ts) and
# procps's sysctl sets each container's namespace limits (through util-linux's nsenter).
# The shellcheck package lints the guest and setup scripts in a fast test (test/shellcheck.test.ts).
# chromium is the real browser the page tests drive with playwright-core (test/helpers/browser.ts);
# fonts-liberation: its fonts (a Recommends of chromium, which --no-install-recommends skips).
# ffmpeg encodes session recordings (src/recording/; ffprobe, from the same package, checks them in tests).
# postgresql: the cluster's shared state (docs/cluster.md); the tests start their own server in a
# temporary directory (the package's default cluster is not needed, and not started by the tests).
packages=(runc debootstrap iproute2 nftables util-linux mount e2fsprogs openssh-client ca-certificates qemu-system-x86 qemu-utils lz4 curl python3 procps shellcheck chromium fonts-liberation ffmpeg postgresql)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "setup: Node.js 20 or newer is required (https://nodejs.org or Debian's nodejs from a newer release)" >&2
  exit 1
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm dependencies" >&2
  npm ci --no-audit --no-fund --loglevel=error
fi

# criu 4.2 or newer for pausing containers to disk, in a private prefix (best effort).
bash scripts/setup-criu.sh || echo "setup: no criu 4.2 or newer (see above): containers pause in memory only" >&2

echo "setup: compiling TypeScript" >&2
npm run --silent build

# The built-in templates: minimal (a minute; the tests use it), desktop, the default for new
# sessions (Firefox, LibreOffice, fonts: several minutes the first time), and xfce, E2B
# Desktop's (Debian's XFCE, about 3.5 minutes). Each is cached by a hash of its recipe; the
# build prints its progress lines on stderr.
echo "setup: guest images of the built-in templates minimal, desktop and xfce (built once, then cached by a hash of each recipe)" >&2
node dist/cli/main.js image build >/dev/null
