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
