#!/usr/bin/env bash
# Boots a real systemd as PID 1 of its own PID, mount, UTS, IPC, net and cgroup namespaces, on an overlay of /
# (the host root read-only below, a tmpfs above), as in /work/shared/FIELD-NOTES.md. Files to hand in are
# copied to /opt/ci inside (never /tmp: Debian's tmpfiles empties it at boot). Usage:
#   boot-systemd.sh <scratch dir> [file to copy into /opt/ci]...
# Runs in the foreground until systemd powers off (SIGRTMIN+4 to the systemd process, whose host pid is the
# only child of this script's unshare). Needs root. BOOT_LOWER (default /) is the overlay's lower directory: another
# distribution's root file system, such as a debootstrapped Debian 13 (scripts/trixie-systemd-check.sh).
set -euo pipefail

scratch=$1
shift

if [ "${BOOT_STAGE:-outer}" = outer ]; then
  # Own mount namespace first: mount a cgroup2 hierarchy and move this shell into a cgroup of its own, so the
  # cgroup namespace below is rooted there and systemd may delegate under it.
  exec unshare --mount --propagation private env BOOT_STAGE=cgroup "$0" "$scratch" "$@"
fi

if [ "$BOOT_STAGE" = cgroup ]; then
  mkdir -p "$scratch/cgroup2"
  mount -t cgroup2 -o nsdelegate cgroup2 "$scratch/cgroup2"
  group="$scratch/cgroup2/config-agent-ci-$$"
  mkdir -p "$group"
  echo $$ >"$group/cgroup.procs"
  exec unshare --pid --fork --mount --uts --ipc --net --cgroup --propagation private \
    env BOOT_STAGE=inner "$0" "$scratch" "$@"
fi

# BOOT_STAGE=inner: PID 1 of the new namespaces.
top="$scratch/top"
mkdir -p "$top"
mount -t tmpfs -o size=512m tmpfs "$top"
mkdir -p "$top/upper" "$top/work" "$top/root"
mount -t overlay overlay -o "lowerdir=${BOOT_LOWER:-/},upperdir=$top/upper,workdir=$top/work" "$top/root"
root="$top/root"

mkdir -p "$root/opt/ci"
for file in "$@"; do cp "$file" "$root/opt/ci/"; done

mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount -t cgroup2 -o nsdelegate cgroup2 "$root/sys/fs/cgroup"
mount -t tmpfs -o mode=0755,size=4m tmpfs "$root/dev"
for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
  IFS=: read -r name major minor <<<"$node"
  mknod -m 0666 "$root/dev/$name" c "$major" "$minor"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
# The host's machine id must not leak in; systemd makes a transient one.
: >"$root/etc/machine-id"

cd "$root"
mkdir -p oldroot
pivot_root . oldroot
cd /
umount -l /oldroot
rmdir /oldroot
# Without this, LoadCredential= leaves the credentials directory empty (FIELD-NOTES, pitfall 1).
mount --make-rshared /
exec env -i container=config-agent-ci /lib/systemd/systemd --log-target=console --log-level=warning
