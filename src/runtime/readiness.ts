import type { ReadinessReport } from '../api/routes/health';
import { comparePositions, type GlobalPosition } from '../infra/eventstore/port';
import type { LagTracker } from '../projections/lag';
import type { Infrastructure } from './adapters';

/** Ready only while the projections are caught up within this much (decisions §8). */
const PROJECTOR_READY_LAG_MS = 5000;
/** A dependency that does not answer within this is down, for readiness. */
const PROBE_TIMEOUT_MS = 2000;

/**
 * `GET /health/ready`: every store answers, and the projector is caught up within 5 s.
 *
 * Under steady writes the watermark is nearly always a little behind the head of the
 * moment; what counts is whether a head seen at some time is applied within 5 s of it, so
 * the oldest head a probe saw unapplied is remembered with when it was seen.
 */
export function createReadiness(infra: Infrastructure, lag: Pick<LagTracker, 'lag'>): () => Promise<ReadinessReport> {
  let pendingHead: { readonly position: GlobalPosition; readonly seenAt: number } | null = null;

  return async () => {
    const checks: Record<string, { status: 'ok' | 'fail'; detail?: string }> = {};
    const check = async (name: string, probe: () => Promise<void>): Promise<void> => {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([probe(), new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), PROBE_TIMEOUT_MS)))]);
        checks[name] = { status: 'ok' };
      } catch (error) {
        checks[name] = { status: 'fail', detail: error instanceof Error ? error.message : 'unavailable' };
      } finally {
        clearTimeout(timer);
      }
    };
    let head: GlobalPosition | null = null;
    await Promise.all([
      check('eventStore', async () => {
        head = await infra.eventStore.headPosition();
      }),
      check('readStore', () => infra.readStore.ping()),
      check('credentials', () => infra.credentials.ping()),
      ...(infra.redis !== null ? [check('redis', async () => void (await infra.redis?.ping()))] : []),
    ]);
    const now = Date.now();
    const current = infra.watermark.current();
    const reached = (position: GlobalPosition): boolean => current !== null && comparePositions(current, position) >= 0;
    if (pendingHead !== null && reached(pendingHead.position)) pendingHead = null;
    // Assigned in a callback above, which the compiler's flow analysis does not follow.
    const seen = head as GlobalPosition | null;
    if (pendingHead === null && seen !== null && !reached(seen)) pendingHead = { position: seen, seenAt: now };
    // Behind since a head seen then, or since this process's oldest append still unapplied, whichever is longer.
    const lagMs = Math.max(pendingHead === null ? 0 : now - pendingHead.seenAt, lag.lag(now).ms);
    checks.projector = lagMs <= PROJECTOR_READY_LAG_MS ? { status: 'ok' } : { status: 'fail', detail: `behind for ${lagMs} ms` };
    return { ready: Object.values(checks).every((c) => c.status === 'ok'), checks };
  };
}
