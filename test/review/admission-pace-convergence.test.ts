import { createAdmission } from '../../src/tunnel/admission';

/**
 * A fleet storm against a process whose real capacity is far below the configured pace, on an
 * injected clock: one core's worth of work done in order (a FIFO of jobs), each hub a client
 * that obeys `retryAfter` (plus up to a second of jitter, as the hub client does) and gives up on
 * an attempt its process has not answered within 10 s. A refused attempt is not free: a new
 * WebSocket (the hub client opens one per attempt), engine.io's open and the namespace
 * refusal.
 */
interface Outcome {
  readonly connectedMs: number | null;
  readonly connected: number;
  readonly refusals: number;
  readonly gaveUp: number;
}

function storm(options: { hubs: number; perSecond: number; handshakeMs: number; refusalMs: number; limitMs: number }): Outcome {
  let t = 0;
  let queueDelay = 0;
  const admission = createAdmission({ perSecond: options.perSecond, loopDelay: () => queueDelay, now: () => t });
  // Deterministic jitter.
  let seed = 7;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  type Job = { readonly at: number; readonly hub: number; readonly startedAt: number; readonly admittedAt?: number };
  // Attempts by the time they reach the process; the process's queue of work.
  const arrivals: Array<{ at: number; hub: number; startedAt: number }> = [];
  const queue: Job[] = [];
  for (let hub = 0; hub < options.hubs; hub++) arrivals.push({ at: Math.floor(random() * 1000), hub, startedAt: 0 });
  let connected = 0;
  let refusals = 0;
  let gaveUp = 0;
  let free = 0;
  // Kept in order of arrival.
  const retryLater = (hub: number, at: number): void => {
    let lo = 0;
    let hi = arrivals.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((arrivals[mid] as { at: number }).at <= at) lo = mid + 1;
      else hi = mid;
    }
    arrivals.splice(lo, 0, { at, hub, startedAt: at });
  };
  arrivals.sort((a, b) => a.at - b.at);
  while (connected < options.hubs) {
    // The process is free at `free`: what arrived by then is queued in order.
    const next = queue[0];
    const arrival = arrivals[0];
    if (next === undefined || (arrival !== undefined && arrival.at <= free)) {
      if (arrival === undefined) break;
      arrivals.shift();
      queue.push({ at: arrival.at, hub: arrival.hub, startedAt: arrival.at });
      free = Math.max(free, arrival.at);
      continue;
    }
    queue.shift();
    t = free;
    if (t > options.limitMs) return { connectedMs: null, connected, refusals, gaveUp };
    queueDelay = t - next.at;
    if (next.admittedAt !== undefined) {
      // The rest of an admitted handshake: answered now.
      free = t + options.handshakeMs;
      t = free;
      admission.settled(next.admittedAt);
      if (t - next.startedAt > 10_000) {
        gaveUp++;
        retryLater(next.hub, next.startedAt + 10_000 + Math.floor(random() * 1000));
      } else connected++;
      continue;
    }
    if (t - next.startedAt > 10_000) {
      // Given up before the process came to it: the upgrade is answered to a closed socket.
      free = t + options.refusalMs;
      gaveUp++;
      retryLater(next.hub, next.startedAt + 10_000 + Math.floor(random() * 1000));
      continue;
    }
    const retryAfter = admission.decide();
    free = t + options.refusalMs;
    if (retryAfter === null) queue.push({ at: free, hub: next.hub, startedAt: next.startedAt, admittedAt: admission.now() });
    else {
      refusals++;
      retryLater(next.hub, free + retryAfter * 1000 + Math.floor(random() * 1000));
    }
  }
  return { connectedMs: t, connected, refusals, gaveUp };
}

describe('a storm against a process far slower than the pace (1,000 a second, the default)', () => {
  // A handshake is 1.9 ms of a core and a refused attempt 0.3 ms; the process has a quarter, a tenth of one.
  test.each([
    { share: 'a quarter of a core', hubs: 5000, handshakeMs: 7.6, refusalMs: 1.2 },
    { share: 'a tenth of a core', hubs: 2000, handshakeMs: 19, refusalMs: 3 },
  ])('with $share, every hub connects within three times the work the fleet is for the process', ({ hubs, handshakeMs, refusalMs }) => {
    // Hubs sent back at the pace, a thousand a second, kept the process late with refusals alone: ~250 of the fleet in ten minutes.
    const outcome = storm({ hubs, perSecond: 1000, handshakeMs, refusalMs, limitMs: 600_000 });
    expect(outcome).toMatchObject({ connected: hubs, connectedMs: expect.any(Number) });
    expect(outcome.connectedMs).toBeLessThanOrEqual(3 * hubs * handshakeMs);
  });
});
