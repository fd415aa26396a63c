// files.rules: which mode and group each managed path should have (first matching rule wins), as a pure resolver.
import { ConfigError, type ConfigIssue } from './errors.js';
import { compileGlob } from './glob-match.js';
import type { AgentConfig } from './schema.js';

/** What a managed file should look like besides its bytes. */
export interface FileMeta {
  mode: number;
  gid: number;
}

/** relative path → desired metadata. */
export type FileMetaResolver = (relativePath: string) => FileMeta;

/** The groups the resolver may hand out: names from /etc/group, and the gids the agent's process holds. */
export interface GroupFacts {
  /** Group name → gid (parseGroupFile of /etc/group). */
  gidByName: ReadonlyMap<string, number>;
  /** process.getgroups() and the primary gid: a process can only chown a file to a group it is in. */
  memberGids: readonly number[];
  /** process.getgid(): the group of files no rule gives a group (so removing a rule takes the group back). */
  primaryGid: number;
  /** Running as root (CAP_CHOWN): any existing group will do. The unit never runs the agent so. */
  privileged?: boolean;
}

/** `/etc/group` text → name → gid. Malformed lines are skipped; the first entry of a name wins, as in libc. */
export function parseGroupFile(text: string): Map<string, number> {
  const groups = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [name, , gid] = line.split(':');
    if (name === undefined || name === '' || name.startsWith('#') || gid === undefined) continue;
    if (!/^\d+$/.test(gid) || groups.has(name)) continue;
    groups.set(name, Number(gid));
  }
  return groups;
}

/** The largest gid a file can have: (gid_t)-1 above it means "no change" to chown. */
const MAX_GID = 0xfffffffe;

/**
 * Compiles files.rules once (globs, group names → gids) and checks that every group is one the agent belongs
 * to, so a rule the agent cannot apply stops the start (exit 78) instead of failing every file it matches.
 * Throws ConfigError naming `files.rules[i].group`.
 */
export function compileFileRules(
  files: AgentConfig['files'],
  groups: GroupFacts,
  source = 'files.rules',
): FileMetaResolver {
  const issues: ConfigIssue[] = [];
  const compiled = files.rules.map((rule, index) => {
    let gid: number | undefined;
    if (rule.group !== undefined) {
      gid = /^\d+$/.test(rule.group) ? Number(rule.group) : groups.gidByName.get(rule.group);
      const path = `files.rules[${index}].group`;
      if (gid === undefined) {
        issues.push({ path, message: `group "${rule.group}" does not exist on this system` });
      } else if (gid > MAX_GID) {
        // 4294967295 is (gid_t)-1, which chown reads as "leave the group as it is": the group would never be the
        // wanted one, and every pass would publish the file again. Larger ones overflow gid_t.
        issues.push({ path, message: `gid ${gid} is not a group id (at most ${MAX_GID})` });
      } else if (
        groups.privileged !== true &&
        gid !== groups.primaryGid &&
        !groups.memberGids.includes(gid)
      ) {
        issues.push({
          path,
          message:
            `the agent is not a member of group "${rule.group}" (gid ${gid}), so it cannot give files that ` +
            `group: add SupplementaryGroups=${rule.group} in a drop-in (docs/operations.md#file-modes-and-groups)`,
        });
      }
    }
    return {
      isMatch: compileGlob(rule.match),
      mode: rule.mode ?? files.mode,
      gid: gid ?? groups.primaryGid,
    };
  });
  if (issues.length > 0) throw new ConfigError(source, issues);
  return (relativePath) => {
    for (const rule of compiled) {
      if (rule.isMatch(relativePath)) return { mode: rule.mode, gid: rule.gid };
    }
    return { mode: files.mode, gid: groups.primaryGid };
  };
}
