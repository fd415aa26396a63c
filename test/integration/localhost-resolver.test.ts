// The built agent with `http://localhost` on a device whose resolver knows no localhost: loopback all the same, no DNS asked.
import { spawnSync } from 'node:child_process';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../helpers/built-packages.js';
import { AgentHarness, leaksApiKey } from '../helpers/harness.js';

// A mount namespace of the agent's own, /etc/hosts and /etc/resolv.conf bound over by empty files: `localhost`
// is then a name the system resolver asks the default DNS server (127.0.0.1:53, nothing there) about.
const probe = spawnSync('unshare', ['-m', 'sh', '-c', 'mount --bind /dev/null /etc/hosts'], {
  encoding: 'utf8',
});
const namespaceSkip =
  probe.status === 0
    ? undefined
    : skipWithoutRoot(`needs a mount namespace (unshare -m: ${probe.stderr.trim()})`);
if (namespaceSkip !== undefined)
  process.stderr.write(`localhost-resolver.test: skipping: ${namespaceSkip}\n`);

let harness: AgentHarness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

describe('server.baseUrl http://localhost with no localhost in /etc/hosts', () => {
  // Before: the name went to the resolver, which asked the network's DNS (here nothing answers: exit 3, nothing
  // written); a hostile resolver's answer would have taken the key, in clear, to its host.
  it.skipIf(namespaceSkip !== undefined)(
    'connects to loopback without the resolver: written, deployed',
    async () => {
      const h = await AgentHarness.create({ registerDevice: true });
      harness = h;
      const port = new URL(h.server.url).port;
      await h.writeConfig({
        server: { baseUrl: `http://localhost:${port}`, apiKeyFile: h.keyPath, timeoutSeconds: 5 },
      });
      const created = await h.createAndDeploy({
        relative_filepath: 'app/settings.json',
        content: { port: 443 },
      });
      const empty = path.join(h.dir, 'empty');
      await writeFile(empty, '');
      const wrapper = path.join(h.dir, 'no-localhost.sh');
      await writeFile(
        wrapper,
        `#!/bin/sh\nexec unshare -m sh -c 'mount --bind ${empty} /etc/hosts && mount --bind ${empty} /etc/resolv.conf && exec "$0" "$@"' ${process.execPath} "$@"\n`,
      );
      await chmod(wrapper, 0o755);
      // The namespace is as the agent will find it: no name for localhost.
      const lookup = spawnSync(wrapper, [
        '-e',
        "require('dns').lookup('localhost',(e)=>process.exit(e?1:0))",
      ]);
      expect(lookup.status).toBe(1);

      const result = await h.run(['--once'], { node: wrapper });
      expect(result.code, result.stderr).toBe(0);
      expect(leaksApiKey(result)).toBe(false);
      expect(JSON.parse(await readFile(h.rootPath('app/settings.json'), 'utf8'))).toEqual({ port: 443 });
      const instance = await h.instance(created.deploy.id);
      expect(instance.activity_status).toBe('deployed');
    },
  );
});
