// bench/fleet.ts run small (60 agents, short phases): the fleet section of `npm run bench` builds real AgentDaemons, which nothing else runs.
import { describe, expect, it } from 'vitest';
import { DEFAULT_FLEET, renderHistogram, simulateFleet } from '../../bench/fleet.js';

describe('bench/fleet.ts', () => {
  it('runs real poll loops through an outage: every agent polls, fails during it, comes back after it', async () => {
    // The bench's timing (30 s polls, 20 % jitter, seed 42) with fewer agents and shorter phases; still past one
    // full-resync period before the outage, so the settled window the steady load is measured over is not empty.
    const options = {
      ...DEFAULT_FLEET,
      agents: 60,
      fullResyncSeconds: 120,
      outageStartSeconds: 300,
      outageSeconds: 60,
      afterSeconds: 300,
    };
    const result = await simulateFleet(options);
    const binOf = (seconds: number) => seconds / options.binSeconds;
    const sum = (bins: number[]) => bins.reduce((total, value) => total + value, 0);
    expect(result.histogram).toHaveLength(binOf(660));
    // Settled: each device polls about once an interval at ≤ 2 requests (2 a poll, 1 a full pass).
    expect(result.steadyRequestsPerDevicePerInterval).toBeGreaterThan(1);
    expect(result.steadyRequestsPerDevicePerInterval).toBeLessThanOrEqual(2);
    // During the outage each attempt is one refused request, and the agents back off: fewer than when settled.
    const outage = sum(result.histogram.slice(binOf(300), binOf(360)));
    const settledMinute = sum(result.histogram.slice(binOf(180), binOf(240)));
    expect(outage).toBeGreaterThan(0);
    expect(outage).toBeLessThan(settledMinute);
    // After recovery every agent reached the service again, and the rate has no stampede.
    expect(result.recoverySpreadSeconds).toBeLessThanOrEqual(300);
    expect(result.peakToMeanAfterRecovery).toBeGreaterThanOrEqual(1);
    expect(result.peakToMeanAfterRecovery).toBeLessThan(3);
    expect(renderHistogram(result).split('\n')).toHaveLength(1 + 11);
  });
});
