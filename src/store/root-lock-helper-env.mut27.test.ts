// The perl that holds the unpadded lock name for a daemon on Node 20 (mut27): an empty environment, and a helper that says nothing.
import { readFile } from 'node:fs/promises';
import { expect, it } from 'vitest';
import { LEGACY_HELPER_PERL, legacyNameHelper, rootLockNames } from './lock.js';

it("the helper's environment is empty, whatever the agent's holds", async () => {
  const { name } = rootLockNames(`mut27:${process.pid}`);
  let helperPid: number | undefined;
  const helper = legacyNameHelper(
    name,
    (pid) => {
      helperPid = pid;
      return '{}';
    },
    LEGACY_HELPER_PERL,
  );
  try {
    expect(await helper.started).toBe('bound');
    expect(helperPid).toBeGreaterThan(0);
    // The agent's own environment is not empty here (PATH at least): an inherited one would show.
    expect(Object.keys(process.env).length).toBeGreaterThan(0);
    // Its length only: a failure must not print the environment it inherited.
    expect((await readFile(`/proc/${helperPid}/environ`)).length).toBe(0);
  } finally {
    await helper.stop();
  }
});

it('a helper program that ends without a word (perl broken) resolves started with nothing, and stops', async () => {
  const { name } = rootLockNames(`mut27-silent:${process.pid}`);
  const helper = legacyNameHelper(name, () => '{}', '/bin/true');
  expect(await helper.started).toBeUndefined();
  await expect(helper.stop()).resolves.toBeUndefined();
});
