// Stray signals: which are ignored, and how often one is logged.
import { constants } from 'node:os';
import { describe, expect, it } from 'vitest';
import { STRAY_SIGNALS, strayCounter } from './stray-signals.js';

describe('strayCounter', () => {
  it('logs the 1st, 10th, 100th and 1000th of each kind, counted apart', () => {
    const count = strayCounter();
    const logged: (number | undefined)[] = [];
    for (let n = 0; n < 1000; n++) {
      const usr2 = count('SIGUSR2');
      if (usr2 !== undefined) logged.push(usr2);
    }
    expect(logged).toEqual([1, 10, 100, 1000]);
    expect(count('SIGPWR')).toBe(1);
    expect(count('SIGPWR')).toBeUndefined();
  });
});

describe('STRAY_SIGNALS', () => {
  it('are distinct signals of this platform (SIGPOLL is SIGIO: listed once)', () => {
    const numbers = STRAY_SIGNALS.map((signal) => constants.signals[signal]);
    expect(numbers.every((n) => typeof n === 'number')).toBe(true);
    expect(new Set(numbers).size).toBe(STRAY_SIGNALS.length);
  });
});

describe('STRAY_SIGNALS against signal(7)', () => {
  // signal(7)'s table: the signals whose default action is to end the process (Term) or dump its core (Core).
  const ENDING = [
    ...['SIGALRM', 'SIGHUP', 'SIGINT', 'SIGIO', 'SIGKILL', 'SIGPIPE', 'SIGPROF', 'SIGPWR', 'SIGSTKFLT'],
    ...['SIGTERM', 'SIGUSR1', 'SIGUSR2', 'SIGVTALRM'],
    ...['SIGABRT', 'SIGBUS', 'SIGFPE', 'SIGILL', 'SIGQUIT', 'SIGSEGV', 'SIGSYS', 'SIGTRAP'],
    ...['SIGXCPU', 'SIGXFSZ'],
  ];
  // What stray-signals.ts says is not stray: a listener of its own, ignored by Node, uncatchable, or kept at
  // its default on purpose (faults, SIGQUIT, SIGXCPU, SIGPROF).
  const NOT_STRAY = [
    ...['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR1', 'SIGPIPE', 'SIGXFSZ', 'SIGKILL'],
    ...['SIGSEGV', 'SIGBUS', 'SIGILL', 'SIGFPE', 'SIGABRT', 'SIGSYS', 'SIGQUIT', 'SIGXCPU', 'SIGPROF'],
  ];

  it('are every signal whose default would end the daemon, but those it handles or keeps on purpose', () => {
    const stray = ENDING.filter((signal) => !NOT_STRAY.includes(signal));
    expect([...STRAY_SIGNALS].sort()).toEqual(stray.sort());
  });
});
