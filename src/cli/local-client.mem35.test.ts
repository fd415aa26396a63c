// `status` and `sync` against answers that are small in bytes but would build a huge tree: refused before parsing.
import { describe, expect, it } from 'vitest';
import { bufferedIo, localSocketEachTest, streamedAnswer } from '../../test/helpers/local-socket.js';
import { AnswerWeigher, MAX_ANSWER_DEPTH, MAX_ANSWER_TOKENS } from './local-answer-weight.js';
import { MAX_LOCAL_ANSWER_BYTES, runStatus, runSync } from './local-client.js';

const socket = localSocketEachTest('config-agent-mem35-');

/** A socket answering `body` in 64 KiB writes, each after the last drained; `sent` counts what the socket took. */
async function serving(body: Buffer): Promise<{ configPath: string; sent: () => number }> {
  const answer = streamedAnswer((sent) =>
    sent < body.length ? body.subarray(sent, sent + 64 * 1024) : undefined,
  );
  return { configPath: await socket.serve(answer.handler), sent: answer.sent };
}

describe('mem35: an answer at socketPath is weighed before it is parsed', () => {
  it('three times the values any status holds, well under the byte cap: exit 3, the rest never read', async () => {
    // `[],` a value: 6.6 million empty arrays in 20 MB cost ~1 GB of RSS to parse (exit 1 after it, before).
    const count = 3 * MAX_ANSWER_TOKENS;
    const body = Buffer.from(`[${'0,'.repeat(count)}0]`);
    expect(body.length).toBeLessThan(MAX_LOCAL_ANSWER_BYTES);
    const answer = await serving(body);
    const io = bufferedIo();

    expect(await runStatus({ configPath: answer.configPath, json: true }, io)).toBe(3);

    expect(io.err()).toContain(`its answer holds more than ${MAX_ANSWER_TOKENS} values`);
    expect(io.out()).toBe('');
    expect(answer.sent()).toBeLessThan(body.length / 2);
  });

  it('nested deeper than a status nests: exit 3 for sync too', async () => {
    const answer = await serving(
      Buffer.from(`${'['.repeat(MAX_ANSWER_DEPTH + 1)}${']'.repeat(MAX_ANSWER_DEPTH + 1)}`),
    );
    const io = bufferedIo();

    expect(await runSync({ configPath: answer.configPath }, io)).toBe(3);

    expect(io.err()).toContain(`its answer nests deeper than ${MAX_ANSWER_DEPTH} levels: not parsed`);
  });

  it("a status's own shape at the bound's edge is parsed, its strings' brackets and commas not counted", async () => {
    const file = {
      path: 'a/[x],{y}:"z".json',
      instanceId: 'cfg_\\"[',
      sha256: 'a'.repeat(64),
      status: 'deployed',
    };
    const status = {
      deviceId: 'dvc_1',
      pendingReports: 0,
      managedFiles: [file, file],
      errors: [],
      lastResult: { converged: true },
    };
    const answer = await serving(Buffer.from(JSON.stringify(status)));
    const io = bufferedIo();

    expect(await runStatus({ configPath: answer.configPath, json: true }, io)).toBe(0);
    expect(JSON.parse(io.out())).toEqual(status);
  });

  it('counts across chunk boundaries: an escape or a quote split between two reads', () => {
    const text = Buffer.from(JSON.stringify({ a: 'x\\",[[[[[[[[[[', b: [[1, 2]] }));
    for (let cut = 0; cut <= text.length; cut++) {
      const weigher = new AnswerWeigher(7, 3);
      expect(weigher.add(text.subarray(0, cut))).toBeUndefined();
      expect(weigher.add(text.subarray(cut))).toBeUndefined();
    }
    // One token more than the bound, one level deeper: refused wherever it is cut.
    expect(new AnswerWeigher(6, 3).add(text)).toContain('more than 6 values');
    expect(new AnswerWeigher(7, 2).add(text)).toContain('deeper than 2 levels');
  });
});
