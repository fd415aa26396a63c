// fix30: the start's "answers again" line names only mounts that answer again.
import { expect, it } from 'vitest';
import { answersAgainLine } from './compose.js';

// attempts() printed "the mount at <the mounts waited for> answers again" whenever the set of late mounts changed:
// also when the one waited for still hung and another had become late beside it.
it('names the mounts waited for that answer now, and says nothing when none does', () => {
  expect(answersAgainLine(['/srv/a'], [])).toBe(
    'config-agent: the mount at /srv/a answers again: trying to start now\n',
  );
  expect(answersAgainLine(['/srv/a'], ['/srv/a', '/srv/b'])).toBeUndefined();
  expect(answersAgainLine(['/srv/a', '/srv/b'], ['/srv/b', '/srv/c'])).toBe(
    'config-agent: the mount at /srv/a answers again: trying to start now\n',
  );
});
