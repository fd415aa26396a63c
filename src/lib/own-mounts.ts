// Which mount points of /proc/self/mountinfo are mounts of their own, not a directory bound onto itself (a sandbox's).

/** A mountinfo path field with its `\040`-style octal escapes (space, tab, newline, backslash) undone. */
export function unescapeMountPath(value: string): string {
  return value.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

/**
 * The mount points of /proc/self/mountinfo's text that some mount holds as a mount of its own: a filesystem's
 * root, another filesystem's directory, or another directory of the same one. A directory bound onto itself is
 * left out: systemd's `ReadWritePaths=`, `ReadOnlyPaths=` and `ProtectSystem=` make such bind mounts in a unit's
 * own namespace (only to change its flags), and so does `mount --bind /x /x`; gone, they leave the very same
 * directory with the same files, so nothing is missing where they were. A mount is bound onto itself when its
 * parent mount is of the same device and the parent's root joined with the mount point's path inside the parent
 * is the mount's own root (fields 1–5: id, parent id, major:minor, root, mount point).
 */
export function ownMountPoints(mountinfo: string): Set<string> {
  return classifyMounts(mountinfo).own;
}

/** The mount points of mountinfo's text where a directory is bound onto itself (`ownMountPoints` leaves them out). */
export function selfBoundMountPoints(mountinfo: string): Set<string> {
  return classifyMounts(mountinfo).selfBound;
}

function classifyMounts(mountinfo: string): { own: Set<string>; selfBound: Set<string> } {
  const mounts = new Map<string, { device: string; root: string; mountPoint: string; parent: string }>();
  for (const line of mountinfo.split('\n')) {
    const [id, parent, device, root, mountPoint] = line.split(' ');
    if (id === undefined || parent === undefined || device === undefined || root === undefined) continue;
    if (mountPoint === undefined) continue;
    mounts.set(id, {
      device,
      root: unescapeMountPath(root),
      mountPoint: unescapeMountPath(mountPoint),
      parent,
    });
  }
  const own = new Set<string>();
  const selfBound = new Set<string>();
  for (const mount of mounts.values()) {
    const above = mounts.get(mount.parent);
    if (above !== undefined && above.device === mount.device && above !== mount) {
      const inside =
        mount.mountPoint === above.mountPoint
          ? ''
          : above.mountPoint === '/'
            ? mount.mountPoint.slice(1)
            : mount.mountPoint.startsWith(`${above.mountPoint}/`)
              ? mount.mountPoint.slice(above.mountPoint.length + 1)
              : undefined;
      const boundOntoItself =
        inside !== undefined &&
        mount.root ===
          (inside === '' ? above.root : above.root === '/' ? `/${inside}` : `${above.root}/${inside}`);
      if (boundOntoItself) {
        selfBound.add(mount.mountPoint);
        continue;
      }
    }
    own.add(mount.mountPoint);
  }
  return { own, selfBound };
}
