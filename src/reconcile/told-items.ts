// What this process already told of each listed item it could not use, so a service listing it on every poll is told once.

/** How many items are remembered; past it the least recently told is forgotten (and told again if listed). */
const MAX_TOLD_ITEMS = 10_000;

/**
 * The items (by id) whose skip or refusal was logged, with what was said of them. A service that lists an instance
 * with a status value this agent does not know (a newer service adding a value to every instance) or content it
 * cannot accept lists it on every poll: logged at its level each time, 300 such instances made 300 lines a poll
 * (864,000 a day at the default 30 s). Told at its level once, then at `debug` while the same is said of it.
 */
export class ToldItems {
  readonly #told = new Map<string, string>();
  readonly #max: number;

  constructor(max = MAX_TOLD_ITEMS) {
    this.#max = max;
  }

  /** True the first time `what` is said of `id` (or when it differs from what was said last). */
  firstTime(id: string, what: string): boolean {
    const before = this.#told.get(id);
    this.#told.delete(id);
    this.#told.set(id, what);
    if (this.#told.size > this.#max) {
      const oldest = this.#told.keys().next().value;
      if (oldest !== undefined) this.#told.delete(oldest);
    }
    return before !== what;
  }
}
