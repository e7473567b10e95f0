import type { CheckState, ReadinessReport } from '../api/routes/health';
import { comparePositions, type GlobalPosition } from '../infra/eventstore/port';
import { isTransientStoreError } from '../infra/transient';
import type { Logger } from '../logger';
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
 *
 * Each check names its state in a fixed word (decisions §8): `ok`; `down`, a store that did
 * not answer in time or could not be reached; `failed`, a store that answered with an error
 * of another kind; `lagging`, projections more than 5 s behind. Never an error message: the
 * detail goes to the log, once each time a check's state changes.
 */
export function createReadiness(infra: Infrastructure, lag: Pick<LagTracker, 'lag'>, logger: Logger): () => Promise<ReadinessReport> {
  let pendingHead: { readonly position: GlobalPosition; readonly seenAt: number } | null = null;
  const previous = new Map<string, CheckState>();
  const record = (checks: Record<string, { status: CheckState }>, name: string, status: CheckState, detail: Record<string, unknown> = {}): void => {
    checks[name] = { status };
    const before = previous.get(name) ?? 'ok';
    previous.set(name, status);
    if (status === before) return;
    if (status === 'ok') logger.info({ check: name, was: before }, 'readiness check ok again');
    else logger.warn({ check: name, status, ...detail }, 'readiness check not ok');
  };

  return async () => {
    const checks: Record<string, { status: CheckState }> = {};
    const check = async (name: string, probe: () => Promise<void>): Promise<void> => {
      let timer: NodeJS.Timeout | undefined;
      let timedOut = false;
      try {
        const deadline = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            timedOut = true;
            reject(new Error(`no answer within ${PROBE_TIMEOUT_MS} ms`));
          }, PROBE_TIMEOUT_MS);
        });
        await Promise.race([probe(), deadline]);
        record(checks, name, 'ok');
      } catch (error) {
        record(checks, name, timedOut || isTransientStoreError(error) ? 'down' : 'failed', { err: error instanceof Error ? error.message : String(error) });
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
    if (lagMs <= PROJECTOR_READY_LAG_MS) record(checks, 'projector', 'ok');
    else record(checks, 'projector', 'lagging', { lagMs });
    return { ready: Object.values(checks).every((c) => c.status === 'ok'), checks };
  };
}
