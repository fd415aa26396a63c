// The V8 flags the commands that sync set, by V8 version and node's own command line.
import { describe, expect, it } from 'vitest';
import { syncV8Flags } from './v8-flags.js';

describe('syncV8Flags', () => {
  it('on V8 11 (Node 20): the raised interrupt budget and Liftoff only for WebAssembly (llhttp)', () => {
    expect(syncV8Flags(11, [])).toEqual(['--interrupt-budget=270336', '--liftoff-only']);
  });

  it('keeps what node was started with', () => {
    expect(syncV8Flags(11, ['--interrupt-budget=1000'])).toEqual(['--liftoff-only']);
    expect(syncV8Flags(11, ['--no-liftoff-only'])).toEqual(['--interrupt-budget=270336']);
    expect(syncV8Flags(11, ['--interrupt_budget=5', '--liftoff_only'])).toEqual([]);
  });

  it('sets nothing on other V8 majors (Node 24 ships V8 13, which lacks the budget flag)', () => {
    expect(syncV8Flags(13, [])).toEqual([]);
    expect(syncV8Flags(12, [])).toEqual([]);
  });
});
