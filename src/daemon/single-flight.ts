// One reconcile at a time: a trigger during a pass schedules exactly one more pass, never two.
export class SingleFlight<T> {
  readonly #run: () => Promise<T>;
  #current: Promise<T> | undefined;
  #next: Promise<T> | undefined;

  constructor(run: () => Promise<T>) {
    this.#run = run;
  }

  get busy(): boolean {
    return this.#current !== undefined;
  }

  /**
   * Starts a pass now when idle. When one is running, every trigger until it ends shares one follow-up pass
   * (level-triggered: the follow-up sees the whole world, so coalescing loses nothing).
   */
  trigger(): Promise<T> {
    if (this.#current === undefined) return this.#start();
    if (this.#next === undefined) {
      this.#next = this.#current.then(
        () => this.#afterCurrent(),
        () => this.#afterCurrent(),
      );
    }
    return this.#next;
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

  #afterCurrent(): Promise<T> {
    this.#next = undefined;
    return this.#start();
  }

  #start(): Promise<T> {
    const pass = this.#run();
    this.#current = pass;
    const clear = () => {
      if (this.#current === pass) this.#current = undefined;
    };
    pass.then(clear, clear);
    return pass;
  }
}
