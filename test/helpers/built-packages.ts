// A test that needs what `npm run package` builds may skip without it, except where .ci/run built the packages.
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
