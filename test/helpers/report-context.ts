// The ReportContext the report tests deliver with: a client of the mock service, no retries inside a request.
import { createClient } from '../../src/api/client.js';
import type { Clock } from '../../src/lib/clock.js';
import { type Logger, silentLogger } from '../../src/lib/logger.js';
import type { ReportContext } from '../../src/reconcile/report.js';
import type { StatusOutbox } from '../../src/store/outbox.js';
import { emptyState, type LocalState } from '../../src/store/state.js';

export interface ReportContextOptions {
  logger?: Logger;
  state?: LocalState;
  seen?: Map<string, string>;
  signal?: AbortSignal;
}

export function reportContext(
  service: { url: string; apiKey: string; clock: Clock },
  outbox: StatusOutbox,
  options: ReportContextOptions = {},
): ReportContext {
  return {
    client: createClient({
      baseUrl: service.url,
      apiKey: service.apiKey,
      timeoutMs: 10_000,
      maxResponseBytes: 1 << 20,
    }),
    outbox,
    state: options.state ?? emptyState('dvc_1'),
    lastSeenUpdatedAt: options.seen ?? new Map(),
    retry: {
      retries: 0,
      baseDelayMs: 0,
      maxDelayMs: 0,
      clock: service.clock,
      random: () => 0.5,
      logger: silentLogger(),
    },
    logger: options.logger ?? silentLogger(),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  };
}
