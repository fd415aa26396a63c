// A listing holding an item nested deeper than JSON.stringify's recursion reaches: it costs only itself.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { createClient } from './client.js';
import { parseCompactListBody } from './json.js';

/** The client under test asks for device `d`. */
const wireInstance = instanceFactory({ device_id: 'd' });

/** Past the native printer's stack (it overflowed at about 10,000 levels here), well within JSON.parse's reach. */
const LEVELS = 20_000;
const DEEP = `${'['.repeat(LEVELS)}${']'.repeat(LEVELS)}`;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A wire instance `<id>.json` of device `d` whose content is the JSON text `content`, as it is on the wire. */
function instanceText(id: string, content: string): string {
  const item = wireInstance({ id, relative_filepath: `${id}.json`, content: { placeholder: 1 } });
  return JSON.stringify(item).replace('{"placeholder":1}', content);
}

/** A compact page (what JSON.stringify writes, as the service sends it) of `items`. */
function page(items: string[]): string {
  const head = `"object":"list","total_count":${items.length},"limit":10,"offset":0,"has_more":false`;
  return `{${head},"data":[${items.join(',')}]}`;
}

async function serve(body: string): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('an item nested tens of thousands of levels deep', () => {
  const body = page([instanceText('deep_content', `{"a":${DEEP}}`), instanceText('good', '{"port":8080}')]);

  it('is judged on its own: the other items of the page are used (the page failed as a network error)', async () => {
    const url = await serve(body);
    const client = createClient({
      baseUrl: url,
      apiKey: 'sk-deep-test',
      timeoutMs: 5_000,
      maxResponseBytes: 1 << 20,
    });
    const judged = [...(await client.listConfigInstancePage()).items];
    expect(judged.map((item) => item.kind)).toEqual(['invalid', 'valid']);
    expect(judged[0]).toMatchObject({
      id: 'deep_content',
      problem: expect.stringContaining('nested more than 512'),
    });
    expect(judged[1]).toMatchObject({ instance: { id: 'good', content: { port: 8080 } } });
  });

  it('anywhere in an item: the compact parse leaves the page to the cut instead of throwing', () => {
    const deepField = page([
      instanceText('deep_field', '{"b":1}').replace('"device":null', `"device":${DEEP}`),
    ]);
    expect(parseCompactListBody(deepField)).toBeUndefined();
  });
});
