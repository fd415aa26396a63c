// bench/lib/lean-mock.ts against the real mock: the same requests on a kept-alive socket get the same bytes back.
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { BENCH_API_KEY, BENCH_DEVICE, benchFixtures, instanceId } from '../../bench/lib/fixtures.js';
import { startLeanMockServer } from '../../bench/lib/lean-mock.js';
import { startMockServer } from '../../src/mock-server/server.js';

const NOW = new Date('2026-11-25T09:00:00.000Z');
const pagePath = (offset: number) =>
  `/v1/config_instances?device_id=${BENCH_DEVICE}&offset=${offset}&limit=100&order_by=id%3Aasc&expand[]=total_count`;

/** One HTTP/1.1 request as the agent writes it (socket-lane.ts), on a kept-alive connection. */
function request(method: string, path: string, body?: string, key: string | null = BENCH_API_KEY): string {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: 127.0.0.1'];
  if (key !== null) lines.push(`x-api-key: ${key}`);
  lines.push('accept: application/json');
  if (body !== undefined) {
    lines.push('content-type: application/json', `content-length: ${Buffer.byteLength(body)}`);
  }
  lines.push('Connection: keep-alive', '', '');
  return lines.join('\r\n') + (body ?? '');
}

/** An answer unframed: status line and headers (the Date left out), then its body's bytes. */
interface Answer {
  head: string;
  body: string;
  /** How the body was framed: a Content-Length or chunks. */
  framing: 'length' | 'chunked';
}

/**
 * Sends each request after the answer to the one before and returns the answers. Under vitest the real mock's
 * hono adapter sends its larger bodies in chunks (run by plain node, as in the bench, it sends a Content-Length:
 * seen on the wire of a bench world); so bodies are compared unframed, and the framing header left out of `head`.
 */
async function exchange(port: number, requests: readonly string[]): Promise<Answer[]> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let buffered = Buffer.alloc(0);
  let waiting: (() => void) | undefined;
  let closed = false;
  socket.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    waiting?.();
  });
  socket.on('close', () => {
    closed = true;
    waiting?.();
  });
  const answers: Answer[] = [];
  try {
    for (const text of requests) {
      socket.write(text);
      for (;;) {
        const answer = takeAnswer(buffered);
        if (answer !== undefined) {
          buffered = buffered.subarray(answer.used);
          answers.push(answer.answer);
          break;
        }
        if (closed) throw new Error(`connection closed after ${answers.length} answers`);
        await new Promise<void>((resolve) => {
          waiting = resolve;
        });
      }
    }
  } finally {
    socket.destroy();
  }
  return answers;
}

function takeAnswer(buffered: Buffer): { answer: Answer; used: number } | undefined {
  const end = buffered.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const lines = buffered.subarray(0, end).toString('latin1').split('\r\n');
  const length = lines.find((line) => /^content-length:/i.test(line));
  const head = lines.filter((line) => !/^(date|content-length|transfer-encoding):/i.test(line)).join('\n');
  if (length !== undefined) {
    const size = Number(length.slice(length.indexOf(':') + 1));
    if (buffered.byteLength < end + 4 + size) return undefined;
    const body = buffered.subarray(end + 4, end + 4 + size).toString('utf8');
    return { answer: { head, body, framing: 'length' }, used: end + 4 + size };
  }
  let at = end + 4;
  let body = Buffer.alloc(0);
  for (;;) {
    const lineEnd = buffered.indexOf('\r\n', at);
    if (lineEnd < 0) return undefined;
    const size = Number.parseInt(buffered.subarray(at, lineEnd).toString('latin1'), 16);
    if (buffered.byteLength < lineEnd + 2 + size + 2) return undefined;
    body = Buffer.concat([body, buffered.subarray(lineEnd + 2, lineEnd + 2 + size)]);
    at = lineEnd + 2 + size + 2;
    if (size === 0) return { answer: { head, body: body.toString('utf8'), framing: 'chunked' }, used: at };
  }
}

const report = (activity: string, error = 'none', extra = '') =>
  `{"activity_status":"${activity}","error_status":"${error}"${extra}}`;

/** A first sync's requests (pages, then reports), with the answers the lean path must hand to the real mock. */
const SEQUENCE = [
  request('GET', pagePath(0)),
  request('GET', pagePath(99)),
  request('GET', pagePath(198)),
  request('GET', pagePath(5)),
  request('PATCH', `/v1/config_instances/${instanceId(0)}`, report('deployed')),
  request(
    'PATCH',
    `/v1/config_instances/${instanceId(1)}`,
    report('deployed', 'failed', ',"message":"disk full"'),
  ),
  request('PATCH', `/v1/config_instances/${instanceId(2)}`, report('deployed', 'none', ',"extra":1')),
  request('PATCH', `/v1/config_instances/${instanceId(3)}`, report('bogus')),
  request('PATCH', `/v1/config_instances/${instanceId(4)}`, 'not json'),
  request('PATCH', `/v1/config_instances/${instanceId(5)}`, ''),
  request('PATCH', '/v1/config_instances/cfg_unknown', report('deployed')),
  request('PATCH', `/v1/config_instances/${instanceId(6)}`, report('deployed'), 'sk_wrong'),
  request('GET', pagePath(0), undefined, 'sk_wrong'),
  request('GET', pagePath(0), undefined, null),
  request('PATCH', `/v1/config_instances/${instanceId(7)}`, report('deployed')),
  request('GET', pagePath(0)),
  request('GET', pagePath(198)),
];

describe('bench/lib/lean-mock.ts', () => {
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });

  it('answers a first sync and the requests it hands on with the real mock’s bytes, state and counts', async () => {
    const fixtures = benchFixtures({ count: 250 });
    const options = { apiKeys: [BENCH_API_KEY], fixtures, now: () => NOW };
    const realServer = await startMockServer(options);
    closers.push(() => realServer.close());
    const leanServer = await startLeanMockServer(options);
    closers.push(() => leanServer.close());
    await leanServer.warm([pagePath(0), pagePath(99), pagePath(198)]);

    const expected = await exchange(realServer.port, SEQUENCE);
    const answers = await exchange(leanServer.port, SEQUENCE);

    expect(answers).toHaveLength(SEQUENCE.length);
    for (const [index, answer] of answers.entries()) {
      expect(answer.head, `answer ${index}`).toBe(expected[index]!.head);
      expect(answer.body, `answer ${index}`).toBe(expected[index]!.body);
    }
    // What the lean path sends itself goes with a Content-Length, as the real mock's answers do under plain node.
    for (const index of [0, 1, 2, 4, 5, 14])
      expect(answers[index]!.framing, `answer ${index}`).toBe('length');
    // The answers themselves are what a first sync needs: pages, a report taken, the refusals.
    expect(expected.map((answer) => answer.head.slice(0, answer.head.indexOf('\n')))).toEqual([
      ...Array<string>(6).fill('HTTP/1.1 200 OK'),
      ...Array<string>(4).fill('HTTP/1.1 400 Bad Request'),
      'HTTP/1.1 404 Not Found',
      ...Array<string>(3).fill('HTTP/1.1 401 Unauthorized'),
      ...Array<string>(3).fill('HTTP/1.1 200 OK'),
    ]);
    expect(expected[15]!.body).toContain(
      `"id":"${instanceId(7)}","target_status":"deployed","activity_status":"deployed"`,
    );
    expect(leanServer.state.reports).toEqual(realServer.state.reports);
    expect(leanServer.state.statsSnapshot()).toEqual(realServer.state.statsSnapshot());
    expect([...leanServer.state.instances.values()]).toEqual([...realServer.state.instances.values()]);
    // The lean path served the warmed pages and the plain reports; the rest went to the real mock.
    expect(leanServer.served()).toEqual({ pages: 3, reports: 3, real: 11 });
  });
});
