// A service whose JSON bodies start with a UTF-8 byte order mark: RFC 8259 §8.1 lets a parser ignore it.
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { AnswerScanner } from './answer-scan.js';
import { createClient, type ReportAnswer } from './client.js';
import { HttpStatusError, MalformedResponseError } from './errors.js';
import { withoutBom } from './json-bytes.js';
import type { ConfigInstance } from './schemas.js';

/** A report answer's head without the fields it passes on (ReportAnswer `fields`). */
function headOf(answer: ReportAnswer | undefined): Omit<ReportAnswer, 'fields'> | undefined {
  if (answer === undefined) return undefined;
  const { fields: _fields, ...head } = answer;
  return head;
}

/** The client under test asks for device `d`. */
const wireInstance = instanceFactory({ device_id: 'd' });

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function serve(answer: (res: ServerResponse) => void): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => answer(res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function sendBom(status: number, text: string | Buffer) {
  return (res: ServerResponse) => {
    const body = Buffer.concat([BOM, typeof text === 'string' ? Buffer.from(text, 'utf8') : text]);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(body.length) });
    res.end(body);
  };
}

/** A wire instance `<id>.json` of device `d` holding `content`. */
const instance = (id: string, content: ConfigInstance['content']) =>
  wireInstance({ id, relative_filepath: `${id}.json`, content });

function listBody(items: unknown[], space?: number): string {
  const page = {
    object: 'list',
    total_count: items.length,
    limit: 10,
    offset: 0,
    has_more: false,
    data: items,
  };
  return JSON.stringify(page, null, space);
}

function client(url: string, maxResponseBytes = 1 << 20) {
  return createClient({ baseUrl: url, apiKey: 'sk-bom-test', timeoutMs: 5_000, maxResponseBytes });
}

function ids(page: Awaited<ReturnType<ReturnType<typeof client>['listConfigInstancePage']>>) {
  return [...page.items].map((item) => (item.kind === 'valid' ? item.instance.id : item));
}

describe('a body starting with a UTF-8 byte order mark', () => {
  it('a listing in the compact form is read as without it', async () => {
    const url = await serve(sendBom(200, listBody([instance('a', { n: 1 }), instance('b', { n: 2 })])));
    expect(ids(await client(url).listConfigInstancePage())).toEqual(['a', 'b']);
  });

  it('a listing in another form (indented: cut into items) is read as without it', async () => {
    const url = await serve(
      sendBom(200, listBody([instance('a', { n: 1.0 }), instance('b', { list: [] })], 2)),
    );
    expect(ids(await client(url).listConfigInstancePage())).toEqual(['a', 'b']);
  });

  it('a listing cut as bytes (one item not UTF-8), a large item judged from them, is read as without it', async () => {
    const big = instance('big', { note: `caf\u00e9 ${'x'.repeat(70_000)}` });
    const text = listBody([instance('a', { n: 1 }), instance('broken', { s: '@' }), big]);
    const body = Buffer.from(text, 'utf8');
    // The "@" of the broken item's string becomes a lone continuation byte: the body is not UTF-8.
    body[body.indexOf('"@"') + 1] = 0x80;
    const url = await serve(sendBom(200, body));
    expect(ids(await client(url).listConfigInstancePage())).toEqual([
      'a',
      expect.objectContaining({ kind: 'invalid', id: 'broken' }),
      'big',
    ]);
  });

  it('a report answer gives its echo, small or large', async () => {
    for (const content of [{ n: 1 }, { note: 'y'.repeat(100_000) }]) {
      const echo = {
        ...instance('cfg_a', content),
        activity_status: 'deployed',
        updated_at: '2025-01-02T00:00:00Z',
      };
      const url = await serve(sendBom(200, JSON.stringify(echo)));
      const answer = await client(url).reportConfigInstanceStatus('cfg_a', {
        activity_status: 'deployed',
        error_status: 'none',
      });
      expect(answer).toMatchObject({
        id: 'cfg_a',
        activity_status: 'deployed',
        updated_at: '2025-01-02T00:00:00Z',
      });
    }
  });

  it('a report answer over the cap: its head is still read from the scan', async () => {
    const echo = {
      ...instance('cfg_a', { note: 'z'.repeat(3000) }),
      activity_status: 'deployed',
      updated_at: '2025-01-03T00:00:00Z',
    };
    const url = await serve(sendBom(200, JSON.stringify(echo)));
    const answer = await client(url, 2048).reportConfigInstanceStatus('cfg_a', {
      activity_status: 'deployed',
      error_status: 'none',
    });
    expect(headOf(answer)).toEqual({
      id: 'cfg_a',
      activity_status: 'deployed',
      error_status: 'none',
      updated_at: '2025-01-03T00:00:00Z',
    });
  });

  it("the service's error body keeps its code", async () => {
    const url = await serve(sendBom(404, '{"error":{"code":"not_found","message":"no such device"}}'));
    const error = await client(url)
      .listConfigInstancePage()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpStatusError);
    expect((error as HttpStatusError).body?.error.code).toBe('not_found');
  });

  it('only one, only at the start: a second one, or one after whitespace, is still malformed', async () => {
    for (const text of [`\ufeff${listBody([])}`, ` \ufeff${listBody([])}`]) {
      const url = await serve(sendBom(200, text));
      await expect(client(url).listConfigInstancePage()).rejects.toBeInstanceOf(MalformedResponseError);
    }
  });
});

describe('withoutBom', () => {
  it('drops exactly the three bytes of a leading mark, nothing else', () => {
    expect(withoutBom(Buffer.from('\ufeff{}'))).toEqual(Buffer.from('{}'));
    expect(withoutBom(Buffer.from('{}'))).toEqual(Buffer.from('{}'));
    expect(withoutBom(Buffer.from([0xef, 0xbb]))).toEqual(Buffer.from([0xef, 0xbb]));
    expect(withoutBom(Buffer.from([0xef, 0xbb, 0xbe, 0x7b]))).toEqual(Buffer.from([0xef, 0xbb, 0xbe, 0x7b]));
    expect(withoutBom(Buffer.from(' \ufeff{}'))).toEqual(Buffer.from(' \ufeff{}'));
  });
});

describe('AnswerScanner and a byte order mark', () => {
  function skeleton(chunks: Buffer[]): string {
    const scanner = new AnswerScanner();
    for (const chunk of chunks) scanner.feed(chunk);
    return scanner.skeleton().toString('utf8');
  }

  it('skips one leading mark, even split across chunks; refuses a partial one or one elsewhere', () => {
    const body = Buffer.concat([BOM, Buffer.from('{"id":"x"}')]);
    expect(skeleton([body])).toBe('{"id":"x"}');
    expect(skeleton([body.subarray(0, 1), body.subarray(1, 2), body.subarray(2)])).toBe('{"id":"x"}');
    expect(skeleton([Buffer.from([0xef, 0xbb]), Buffer.from('{"id":"x"}')])).toBe('');
    expect(skeleton([Buffer.from(' '), body])).toBe('');
    expect(skeleton([BOM, body])).toBe('');
  });
});
