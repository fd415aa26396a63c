// ToldItems: each item told once while the same is said of it, and at most `max` remembered.
import { describe, expect, it } from 'vitest';
import { ToldItems } from './told-items.js';

describe('ToldItems', () => {
  it('is true the first time, and again when what is said changes', () => {
    const told = new ToldItems();
    expect(told.firstTime('cfg_a', 'target_status "x"')).toBe(true);
    expect(told.firstTime('cfg_a', 'target_status "x"')).toBe(false);
    expect(told.firstTime('cfg_a', 'target_status "y"')).toBe(true);
    expect(told.firstTime('cfg_b', 'target_status "y"')).toBe(true);
  });

  it('forgets the least recently told past its bound, which is told again', () => {
    const told = new ToldItems(2);
    told.firstTime('a', 'x');
    told.firstTime('b', 'x');
    expect(told.firstTime('a', 'x')).toBe(false);
    told.firstTime('c', 'x');
    expect(told.firstTime('a', 'x')).toBe(false);
    expect(told.firstTime('b', 'x')).toBe(true);
  });
});
