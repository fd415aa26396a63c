// One reconcile at a time: a trigger during a pass schedules exactly one more pass, never two.
export class SingleFlight<T> {
  readonly #run: () => Promise<T>;
  #current: Promise<unknown> | undefined;
  #next: Promise<T> | undefined;
  #generation = 0;

  constructor(run: () => Promise<T>) {
    this.#run = run;
  }

  get busy(): boolean {
    return this.#current !== undefined;
  }

  /**
   * How many jobs (passes and exclusive jobs) have started. Read while idle, it tells later whether anything
   * ran since: equal and still idle means nothing did.
   */
  get generation(): number {
    return this.#generation;
  }

  /**
   * Starts a pass now when idle. When one is running, every trigger until it ends shares one follow-up pass
   * (level-triggered: the follow-up sees the whole world, so coalescing loses nothing).
   */
  trigger(): Promise<T> {
    if (this.#current === undefined) return this.#start(this.#run);
    if (this.#next === undefined) {
      const after = () => {
        this.#next = undefined;
        return this.#start(this.#run);
      };
      this.#next = this.#current.then(after, after);
    }
    return this.#next;
  }

  /**
   * Runs `job` when no pass runs, and holds passes off until it ends (a configuration reload). Triggers that
   * arrive meanwhile share one pass after it.
   */
  async exclusive<R>(job: () => Promise<R>): Promise<R> {
    while (this.#current !== undefined) await this.idle();
    return this.#start(job);
  }

  /** Resolves when no pass is running or queued. */
  async idle(): Promise<void> {
    while (this.#current !== undefined) {
      await (this.#next ?? this.#current).then(
        () => undefined,
        () => undefined,
      );
    }
  }

  #start<R>(job: () => Promise<R>): Promise<R> {
    this.#generation += 1;
    const running = job();
    this.#current = running;
    const clear = () => {
      if (this.#current === running) this.#current = undefined;
    };
    running.then(clear, clear);
    return running;
  }
}
