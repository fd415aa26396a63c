// A test that needs what `npm run package` builds, or root, may skip without it, except under .ci/run, which gives both.
/** Set to 1 by .ci/run once `npm run package` has succeeded: from then on a missing artifact is a failure. */
export const PACKAGES_BUILT_ENV = 'CONFIG_AGENT_PACKAGES_BUILT';

/**
 * The reason to skip when a package artifact is missing. Where .ci/run built the packages it throws instead, so a
 * build that stopped making the artifact (or a path this test got wrong) fails CI rather than hiding the test.
 */
export function skipWithoutPackages(reason: string): string {
  if (process.env[PACKAGES_BUILT_ENV] === '1') {
    throw new Error(
      `${reason}; yet .ci/run built the packages (${PACKAGES_BUILT_ENV}=1): the artifact is missing`,
    );
  }
  return reason;
}

/** Set to 1 by .ci/run when it runs as root: namespaces, mounts and a booted systemd are then its to give. */
export const CI_ROOT_ENV = 'CONFIG_AGENT_CI_ROOT';

/**
 * The reason to skip a test that needs root's namespaces or mounts. Where .ci/run runs as root it throws instead: a
 * capability CI provides that went missing fails the run rather than hiding the test.
 */
export function skipWithoutRoot(reason: string): string {
  if (process.env[CI_ROOT_ENV] === '1') {
    throw new Error(`${reason}; yet .ci/run runs as root (${CI_ROOT_ENV}=1): this test must run there`);
  }
  return reason;
}
