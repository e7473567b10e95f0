/**
 * The embedded log's reading caches (records just committed decoded once for every
 * subscription, a subscription going on from the end of the last record it handed out, the
 * last records read from segment files kept decoded) against what the log holds. Random
 * workloads on the simulated file system: appends in batches to a few streams and to heartbeat
 * streams (reclaimed by compactions as they age), small segments (many seals), failed writes
 * (cut back, then resumed), restarts, stream reads forwards and backwards (more than the kept
 * records), and subscriptions started at random points and kept running. Every stream read must
 * give exactly what was acknowledged; every subscription every acknowledged event after its
 * start exactly once, in position order (a reclaimed heartbeat at most once); and at the end a
 * fresh process reading the same log from the start the same sequence.
 */
import { randomUUID } from 'node:crypto';
import { openEmbeddedEventStore, type EmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { type GlobalPosition, type NewEvent, type RecordedEvent, type Subscription } from '../../src/infra/eventstore/port';
import { Rng } from '../sim/rng';
import { NO_FAULTS, SimFs } from '../sim/sim-fs';

const DIR = '/sim/data';
const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'review' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

interface Seen {
  readonly id: string;
  readonly stream: string;
  readonly position: bigint;
}

/** A subscription read in the background into `seen`. */
class Follower {
  readonly seen: Seen[] = [];
  private readonly waiters: Array<() => void> = [];
  readonly done: Promise<void>;
  failure: unknown = null;

  constructor(
    readonly subscription: Subscription,
    readonly from: bigint | null,
  ) {
    this.done = (async () => {
      try {
        for await (const item of subscription) {
          if (item.kind === 'event') this.seen.push({ id: item.event.id, stream: item.event.streamName, position: item.event.position.commit });
          for (const wake of this.waiters.splice(0)) wake();
        }
      } catch (error) {
        this.failure = error;
      }
      for (const wake of this.waiters.splice(0)) wake();
    })();
  }

  async until(id: string): Promise<void> {
    while (this.failure === null && !this.seen.some((s) => s.id === id)) await new Promise<void>((resolve) => this.waiters.push(resolve));
  }
}

function event(type: string, size: number): NewEvent {
  return { id: randomUUID(), type, data: { pad: 'x'.repeat(size), n: size, secret: `s-${size}` }, metadata: meta };
}

const ERASED = '[erased]';

/** What a workload did (shown when it diverges, and pinned below to be more than nothing). */
const stats = { appends: 0, faults: 0, compacted: 0, restarts: 0, rewrites: 0 };

async function divergence(seed: number): Promise<string | null> {
  const rng = new Rng(seed);
  stats.appends = 0;
  stats.faults = 0;
  stats.compacted = 0;
  stats.restarts = 0;
  stats.rewrites = 0;
  const fs = new SimFs(new Rng(seed + 1000));
  await fs.mkdir(DIR);
  let clock = Date.parse('2026-11-27T10:00:00.000Z');
  const open = (): Promise<EmbeddedEventStore> =>
    openEmbeddedEventStore(DIR, { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined, segmentBytes: 6 * 1024, now: () => clock });
  let store = await open();
  const streams = ['device-a', 'device-b', 'user-c', 'session-d'];
  const heartbeats = ['heartbeat-1', 'heartbeat-2'];
  for (const hb of heartbeats) await store.setStreamMaxAge(hb, 1);
  /** Acknowledged events, in position order. */
  const log: Seen[] = [];
  const byStream = new Map<string, string[]>();
  /** Events whose secret an erasure rewrote. */
  const erased = new Set<string>();
  const reclaimable = (stream: string): boolean => stream.startsWith('heartbeat-');
  let followers: Follower[] = [];
  const retired: Follower[] = [];
  const startFollower = (): void => {
    const known = log.filter((s) => !reclaimable(s.stream));
    const at = known.length === 0 || rng.next() < 0.3 ? null : (known[Math.floor(rng.next() * known.length)] as Seen).position;
    const fromPosition: GlobalPosition | undefined = at === null ? undefined : { commit: at, prepare: at };
    followers.push(new Follower(store.subscribe(fromPosition === undefined ? {} : { fromPosition }), at));
  };
  const check = (f: Follower, label: string): string | null => {
    if (f.failure !== null) return `${label}: subscription failed: ${String(f.failure)}`;
    for (let i = 1; i < f.seen.length; i++) {
      if ((f.seen[i] as Seen).position <= (f.seen[i - 1] as Seen).position) return `${label}: position ${(f.seen[i] as Seen).position} after ${(f.seen[i - 1] as Seen).position}`;
    }
    const got = f.seen.filter((s) => !reclaimable(s.stream)).map((s) => s.id);
    const want = log.filter((s) => !reclaimable(s.stream) && (f.from === null || s.position > f.from)).map((s) => s.id);
    const prefix = want.slice(0, got.length);
    if (JSON.stringify(got) !== JSON.stringify(prefix)) return `${label} (from ${String(f.from)}): handed out ${got.length} events differing from the log at #${got.findIndex((id, i) => id !== prefix[i])}`;
    const acked = new Set(log.map((s) => s.id));
    const stray = f.seen.find((s) => !acked.has(s.id));
    return stray === undefined ? null : `${label}: handed out ${stray.id} (${stray.stream}) that was never acknowledged`;
  };
  for (let step = 0; step < 220; step++) {
    const roll = rng.next();
    if (roll < 0.45) {
      const stream = rng.next() < 0.3 ? (heartbeats[Math.floor(rng.next() * 2)] as string) : (streams[Math.floor(rng.next() * streams.length)] as string);
      // Now and then a long append: more records than the reader keeps decoded (2,048).
      const bulk = !reclaimable(stream) && rng.next() < 0.04;
      const events = bulk
        ? Array.from({ length: 700 }, () => event('Thing', Math.floor(rng.next() * 20)))
        : Array.from({ length: 1 + Math.floor(rng.next() * 3) }, () => event(reclaimable(stream) ? 'HeartbeatReceived' : 'Thing', Math.floor(rng.next() * 900)));
      stats.appends++;
      const fault = rng.next() < 0.08;
      if (fault) stats.faults++;
      if (fault) fs.faults = { ...NO_FAULTS, ...(rng.next() < 0.5 ? { syncEio: 1 } : { diskFull: true }) };
      const result = await Promise.all(
        // Sometimes two appends in one group commit.
        (rng.next() < 0.3 ? [events.slice(0, 1), events.slice(1)] : [events]).filter((batch) => batch.length > 0).map((batch) =>
          store.append(stream, batch, 'any').then(
            (r) => ({ batch, revision: r.nextExpectedRevision }),
            () => null,
          ),
        ),
      );
      fs.faults = { ...NO_FAULTS };
      for (const r of result) {
        if (r === null) continue;
        // Positions of one append: read them back by revision (the result gives the last).
        const back: RecordedEvent[] = [];
        for await (const e of store.readStream(stream, { fromRevision: r.revision - BigInt(r.batch.length - 1), maxCount: r.batch.length })) back.push(e);
        if (back.map((e) => e.id).join() !== r.batch.map((e) => e.id).join()) return `step ${step}: the events appended do not read back at their revisions`;
        for (const e of back) {
          log.push({ id: e.id, stream, position: e.position.commit });
        }
      }
      for (const r of result.filter((x) => x !== null).sort((a, b) => (a.revision < b.revision ? -1 : 1))) byStream.set(stream, [...(byStream.get(stream) ?? []), ...r.batch.map((e) => e.id)]);
      log.sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0));
      if (fault && result.some((r) => r !== null)) return `step ${step}: an append under a fault was acknowledged`;
    } else if (roll < 0.6) {
      const stream = streams[Math.floor(rng.next() * streams.length)] as string;
      const backwards = rng.next() < 0.4;
      const got: string[] = [];
      for await (const e of store.readStream(stream, backwards ? { direction: 'backwards' } : {})) got.push(`${e.id}:${String((e.data as { secret?: unknown }).secret === ERASED)}`);
      const want = (byStream.get(stream) ?? []).map((id) => `${id}:${String(erased.has(id))}`);
      if (backwards) want.reverse();
      if (JSON.stringify(got) !== JSON.stringify(want)) return `step ${step}: readStream(${stream}${backwards ? ', backwards' : ''}) gave ${got.length} events, the log holds ${want.length}${got.length === want.length ? ` (first difference at #${got.findIndex((g, i) => g !== want[i])}: ${got.find((g, i) => g !== want[i])})` : ''}`;
    } else if (roll < 0.7) {
      startFollower();
    } else if (roll < 0.78) {
      clock += 10_000;
      stats.compacted += (await store.reclaimExpired()).segmentsCompacted;
    } else if (roll < 0.86) {
      // An erasure's rewrite of one stream (its segments compacted with the field "[erased]").
      const stream = streams[Math.floor(rng.next() * streams.length)] as string;
      const ids = [...(byStream.get(stream) ?? [])];
      await store.rewriteStreams([stream], (name, e) => {
        const data = e.data as Record<string, unknown>;
        return name !== stream || data.secret === ERASED ? null : { ...e, data: { ...data, secret: ERASED } };
      });
      stats.rewrites++;
      for (const id of ids) erased.add(id);
    } else if (roll < 0.9) {
      stats.restarts++;
      // A restart: followers go on from where they were, in the new process.
      await Promise.all(followers.map((f) => f.subscription.close()));
      await Promise.all(followers.map((f) => f.done));
      for (const [i, f] of followers.entries()) {
        const found = check(f, `step ${step}: follower ${i} before a restart`);
        if (found !== null) return found;
      }
      retired.push(...followers);
      await store.close();
      fs.processExit();
      store = await open();
      const resumed = followers.map((f) => {
        const last = f.seen.filter((s) => !reclaimable(s.stream)).at(-1)?.position ?? f.from;
        return new Follower(store.subscribe(last === null ? {} : { fromPosition: { commit: last, prepare: last } }), last);
      });
      followers = resumed;
    }
    // Followers catch up with the last acknowledged event and agree with the log.
    const last = log.at(-1);
    if (last !== undefined) await Promise.all(followers.filter((f) => f.from === null || f.from < last.position).map((f) => f.until(last.id)));
    for (const [i, f] of followers.entries()) {
      const found = check(f, `step ${step}: follower ${i}`);
      if (found !== null) return found;
    }
  }
  await Promise.all(followers.map((f) => f.subscription.close()));
  await store.close();
  fs.processExit();
  // A fresh process reading the same log from the start.
  const fresh = await open();
  const all = new Follower(fresh.subscribe(), null);
  const lastKept = log.filter((s) => !reclaimable(s.stream)).at(-1);
  if (lastKept !== undefined) await all.until(lastKept.id);
  await all.subscription.close();
  await fresh.close();
  const found = check(all, 'a fresh process');
  if (found !== null) return found;
  return all.seen.length === new Set(all.seen.map((s) => s.id)).size ? null : 'a fresh process: duplicates';
}

describe('embedded log: reading caches agree with the log under random workloads', () => {
  jest.setTimeout(120_000);
  const totals = { appends: 0, faults: 0, compacted: 0, restarts: 0, rewrites: 0 };
  test.each(Array.from({ length: 16 }, (_, i) => i + 1))('seed %i', async (seed) => {
    const found = await divergence(seed);
    expect(found === null ? null : `${found} (${JSON.stringify(stats)})`).toBeNull();
    for (const key of Object.keys(totals) as Array<keyof typeof totals>) totals[key] += stats[key];
  });
  test('the workloads compacted segments, failed writes and restarted', () => {
    expect(totals.compacted).toBeGreaterThan(0);
    expect(totals.faults).toBeGreaterThan(0);
    expect(totals.restarts).toBeGreaterThan(0);
    expect(totals.rewrites).toBeGreaterThan(0);
  });
});

describe('embedded log: a subscription that falls behind the recent commits (4 MiB) goes on exactly where it was', () => {
  jest.setTimeout(120_000);
  test('a slow subscriber and subscribers started at evicted positions hand out every event once, in order', async () => {
    const fs = new SimFs(new Rng(77));
    await fs.mkdir(DIR);
    const store = await openEmbeddedEventStore(DIR, { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined });
    const ids: string[] = [];
    await store.append('device-x', [event('Thing', 10)], 'any');
    ids.push('');
    // A subscriber that reads one event, then waits while 6 MiB are committed.
    const slow = store.subscribe();
    const iterator = slow[Symbol.asyncIterator]();
    await iterator.next();
    for (let i = 0; i < 96; i++) {
      const batch = Array.from({ length: 4 }, () => event('Thing', 16 * 1024));
      await store.append(`device-${i % 5}`, batch, 'any');
      ids.push(...batch.map((e) => e.id));
    }
    const got: string[] = [];
    const seenPositions: bigint[] = [];
    while (got.length < ids.length - 1) {
      const item = await Promise.race([iterator.next(), new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`stuck after ${got.length} of ${ids.length - 1}`)), 10_000))]);
      if (item.done === true) break;
      if (item.value.kind === 'event') {
        got.push(item.value.event.id);
        seenPositions.push(item.value.event.position.commit);
      }
    }
    await slow.close();
    expect(got).toEqual(ids.slice(1));
    // Started later from positions long gone from the recent commits: the rest, once, in order.
    for (const k of [1, 17, 200, 381]) {
      const from = seenPositions[k] as bigint;
      const later = new Follower(store.subscribe({ fromPosition: { commit: from, prepare: from } }), from);
      await Promise.race([later.until(ids.at(-1) as string), new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`stuck from #${k}: ${later.seen.length} seen, failure ${String(later.failure)}`)), 10_000))]);
      await later.subscription.close();
      expect(later.seen.map((s) => s.id)).toEqual(ids.slice(k + 2));
    }
    await store.close();
  });
});
