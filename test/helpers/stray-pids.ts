// Processes a test of real hooks may leave behind (a double-forked daemon): SIGKILLed after each test.
import { afterEach } from 'vitest';

/** A list a test pushes the pids of its strays to; each is SIGKILLed after the test (gone already: fine). */
export function strayPidsEachTest(): number[] {
  const strays: number[] = [];
  afterEach(() => {
    for (const pid of strays.splice(0)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  });
  return strays;
}
