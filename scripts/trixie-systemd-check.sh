#!/usr/bin/env bash
# By hand, not in CI: the packages under Debian 13's systemd 257 and Debian's Node 20.19 (docs/operations.md, "Debian 13").
# Debootstraps a minimal trixie (minbase + systemd, nodejs, perl-base) into ROOTFS once (~370 MB, a few minutes),
# builds the packages unless dist-pkg/ has them, then runs test/systemd/deb.test.ts with that root file system as the
# booted machine's (CONFIG_AGENT_SYSTEMD_ROOT), and prints systemd-analyze security's verdict on the unit there.
# Needs root, network access to the mirror, and dist/ built (npm run build). Usage, from the repository:
#   sudo scripts/trixie-systemd-check.sh [rootfs directory, default /var/tmp/trixie-rootfs]
set -euo pipefail

rootfs=${1:-/var/tmp/trixie-rootfs}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cd "$(dirname "$0")/.."

if [ ! -x "$rootfs/lib/systemd/systemd" ]; then
  command -v debootstrap >/dev/null || apt-get install -y debootstrap
  debootstrap --variant=minbase --include=systemd,systemd-sysv,nodejs,perl-base,dbus trixie "$rootfs" "$mirror"
fi
echo "trixie: $(chroot "$rootfs" systemctl --version | head -n 1); node $(chroot "$rootfs" node --version)"

arch=$(dpkg --print-architecture)
if ! ls dist-pkg/config-agent-node_*_"$arch".deb dist-pkg/config-agent_*_all.deb >/dev/null 2>&1; then
  npm run package -- --arch "$arch"
fi

# The unit's exposure under 257 (the unit test checks it under the host's systemd): a bind mount in a mount
# namespace of its own, so the root file system itself is left as debootstrap made it.
unshare --mount --propagation private sh -c \
  "mount --bind '$PWD/systemd' '$rootfs/mnt' && chroot '$rootfs' systemd-analyze security --offline=yes --threshold=15 /mnt/config-agent.service" |
  tail -n 1

CONFIG_AGENT_SYSTEMD_ROOT=$rootfs timeout 900 npx vitest run test/systemd/deb.test.ts
