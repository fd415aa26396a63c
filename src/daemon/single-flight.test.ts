// SingleFlight: one pass at a time, one shared follow-up, exclusive jobs, idle, and the pass generation.
import { describe, expect, it } from 'vitest';
import { SingleFlight } from './single-flight.js';

/** A pass that runs until the test lets it finish, counting how many started. */
function gatedPasses() {
  const gates: Array<() => void> = [];
  let started = 0;
  const runner = new SingleFlight(async () => {
    started += 1;
    const number = started;
    await new Promise<void>((resolve) => gates.push(resolve));
    return number;
  });
  const finishNext = async () => {
    while (gates.length === 0) await new Promise((resolve) => setImmediate(resolve));
    gates.shift()!();
  };
  return { runner, finishNext, started: () => started };
}

describe('SingleFlight', () => {
  it('runs one pass at a time; triggers during a pass share exactly one follow-up', async () => {
    const { runner, finishNext, started } = gatedPasses();
    const first = runner.trigger();
    const followUps = [runner.trigger(), runner.trigger(), runner.trigger()];
    expect(started()).toBe(1);
    await finishNext();
    expect(await first).toBe(1);
    await finishNext();
    expect(await Promise.all(followUps)).toEqual([2, 2, 2]);
    expect(started()).toBe(2);
    expect(runner.busy).toBe(false);
  });

  it('a failed pass still lets the follow-up run', async () => {
    let calls = 0;
    const runner = new SingleFlight(async () => {
      calls += 1;
      if (calls === 1) throw new Error('boom');
      return calls;
    });
    const first = runner.trigger();
    const second = runner.trigger();
    await expect(first).rejects.toThrow('boom');
    expect(await second).toBe(2);
  });

  it('exclusive waits for the running pass, holds passes off, then lets one follow-up run', async () => {
    const { runner, finishNext, started } = gatedPasses();
    const pass = runner.trigger();
    const order: string[] = [];
    const job = runner.exclusive(async () => {
      order.push(`job after ${started()} pass(es)`);
      return 'reloaded';
    });
    await finishNext();
    await pass;
    expect(await job).toBe('reloaded');
    const next = runner.trigger();
    await finishNext();
    expect(await next).toBe(2);
    expect(order).toEqual(['job after 1 pass(es)']);
  });

  it('idle resolves once nothing runs or waits', async () => {
    const { runner, finishNext } = gatedPasses();
    void runner.trigger();
    void runner.trigger();
    let idle = false;
    const waiting = runner.idle().then(() => {
      idle = true;
    });
    await finishNext();
    await new Promise((resolve) => setImmediate(resolve));
    expect(idle).toBe(false);
    await finishNext();
    await waiting;
    expect(idle).toBe(true);
  });

  it('generation counts every job that started: passes, follow-ups and exclusive jobs, failed ones too', async () => {
    const { runner, finishNext } = gatedPasses();
    expect(runner.generation).toBe(0);
    const first = runner.trigger();
    expect([runner.generation, runner.busy]).toEqual([1, true]);
    const followUp = runner.trigger();
    // A queued follow-up has not started yet.
    expect(runner.generation).toBe(1);
    await finishNext();
    await first;
    await finishNext();
    await followUp;
    expect([runner.generation, runner.busy]).toEqual([2, false]);
    await runner.exclusive(async () => undefined);
    expect(runner.generation).toBe(3);

    const failing = new SingleFlight(async () => {
      throw new Error('boom');
    });
    await expect(failing.trigger()).rejects.toThrow('boom');
    expect([failing.generation, failing.busy]).toEqual([1, false]);
  });
});
