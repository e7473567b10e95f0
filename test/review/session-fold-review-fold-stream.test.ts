import { randomUUID } from 'node:crypto';
import {
  createStateCache,
  foldStream,
  handleCommand,
  newCommandContext,
  toNewEvents,
  type Clock,
  type FoldedStream,
  type StateCache,
} from '../../src/commands/handler';
import { sessionStream } from '../../src/domain/events';
import { evolveSession, initialSessionState, sessionDecider, type OpenSession, type SessionEvent, type SessionState } from '../../src/domain/session';
import { deepFreeze } from '../../src/infra/eventstore/deep-freeze';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { mulberry32 } from '../support/prng';
import { privateEventStoreEachTest } from '../support/private-event-store';

/**
 * Review of `foldStream` with the session decider's `evolveAll`, on the service's own kind of
 * store (the embedded log under the private store, whose events are shared and frozen):
 * streams just under, at and across the 512-event batch, whole or from an earlier fold, give
 * the fold of `evolveSession` one event at a time, serialized; no fold handed out (an earlier
 * fold given as `from`, a cached fold, a state `handleCommand` returned) is changed afterwards.
 */

const fixture = privateEventStoreEachTest('hhc-session-fold-', (dir) => openEmbeddedEventStore(dir));
const ctx = newCommandContext({ type: 'system', id: 'review' }, randomUUID());
const T0 = Date.parse('2026-11-28T00:00:00.000Z');
const at = (i: number): string => new Date(T0 + i * 1000).toISOString();

/** A family refreshed over and over, with what a stream may also hold: repeated issues, another family's events, reuse, revocation and issues after it. */
function history(random: () => number, familyId: string, length: number): SessionEvent[] {
  const userId = randomUUID();
  const jtis: string[] = [];
  const events: SessionEvent[] = [];
  for (let i = 0; events.length < length; i++) {
    const pick = random();
    const known = jtis[Math.floor(random() * jtis.length)] ?? randomUUID();
    const family = random() < 0.03 ? randomUUID() : familyId;
    if (pick < 0.05 || jtis.length === 0) {
      const jti = random() < 0.1 ? known : randomUUID();
      jtis.push(jti);
      events.push({ type: 'RefreshIssued', data: { familyId: family, jti, userId, issuedAt: at(i), expiresAt: at(i + 10_000), ip: '10.0.0.1', userAgent: 'app' } });
    } else if (pick < 0.9) {
      // A rotation and the token that replaces it, as the service writes them.
      const next = randomUUID();
      jtis.push(next);
      events.push({ type: 'RefreshRotated', data: { familyId: family, jti: random() < 0.95 ? known : randomUUID(), replacedBy: next, rotatedAt: at(i) } });
      events.push({ type: 'RefreshIssued', data: { familyId: family, jti: next, userId, issuedAt: at(i), expiresAt: at(i + 10_000), ip: '10.0.0.1', userAgent: 'app' } });
    } else if (pick < 0.95) {
      events.push({ type: 'RefreshReuseDetected', data: { familyId: family, userId, jti: known, detectedAt: at(i), ip: null, userAgent: null } });
    } else {
      events.push({ type: 'RefreshRevoked', data: { familyId: family, userId, reason: 'reuse', revokedAt: at(i) } });
    }
  }
  return events.slice(0, length);
}

async function write(store: EventStore, stream: string, events: readonly SessionEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += 200) {
    await store.append(stream, toNewEvents(events.slice(i, i + 200), ctx, at(i)), i === 0 ? 'no_stream' : BigInt(i - 1));
  }
}

/** The session decider, counting the sizes of the batches given to its evolveAll. */
function counting(sizes: number[]): typeof sessionDecider {
  const evolveAll = sessionDecider.evolveAll;
  if (evolveAll === undefined) throw new Error('the session decider has an evolveAll');
  return {
    ...sessionDecider,
    evolveAll: (state, events) => {
      sizes.push(events.length);
      return evolveAll(state, events);
    },
  };
}

const oneByOne = (events: readonly SessionEvent[]): SessionState => events.reduce(evolveSession, initialSessionState());

describe('foldStream of a session stream, in batches of 512', () => {
  test.each([1, 511, 512, 513, 1024, 1537])('%i events: whole, and from a frozen earlier fold, the fold of evolveSession', async (length) => {
    const store = fixture.store;
    const stream = sessionStream(randomUUID());
    const events = history(mulberry32(length), stream.slice('session-'.length), length);
    await write(store, stream, events);

    const sizes: number[] = [];
    const whole = await foldStream(store, counting(sizes), stream);
    expect(whole.revision).toBe(BigInt(length - 1));
    expect(JSON.stringify(whole.state)).toBe(JSON.stringify(oneByOne(events)));
    const batches = Array.from({ length: Math.ceil(length / 512) }, (_, i) => Math.min(512, length - i * 512));
    expect(sizes).toEqual(batches);

    // From an earlier fold, frozen as a shared one would be: the same state, the earlier one untouched.
    for (const upTo of [1, Math.floor(length / 3), length - 1].filter((n) => n >= 1 && n < length)) {
      const earlier: FoldedStream<SessionState> = deepFreeze({ state: oneByOne(events.slice(0, upTo)), revision: BigInt(upTo - 1) });
      const before = JSON.stringify(earlier.state);
      const onward = await foldStream(store, sessionDecider, stream, { from: earlier });
      expect({ upTo, revision: onward.revision, json: JSON.stringify(onward.state) }).toEqual({ upTo, revision: BigInt(length - 1), json: JSON.stringify(whole.state) });
      expect(JSON.stringify(earlier.state)).toBe(before);
    }
  });

  test('handleCommand with a cache on an aged family: every fold it caches or returns stays as it was handed out', async () => {
    const store = fixture.store;
    const familyId = randomUUID();
    const stream = sessionStream(familyId);
    const cached = createStateCache<SessionState>(10);
    // Every fold the cache is given is frozen there: a later write to it would throw.
    const cache: StateCache<SessionState> = {
      get: (name) => cached.get(name),
      set: (name, folded) => cached.set(name, deepFreeze(folded)),
      forget: (name) => cached.forget(name),
    };
    let now = T0;
    const clock: Clock = { now: () => new Date(now) };
    const handed: Array<{ state: SessionState; json: string }> = [];
    const keep = (state: SessionState): void => void handed.push({ state, json: JSON.stringify(state) });

    let jti = randomUUID();
    keep(
      (await handleCommand(store, sessionDecider, stream, { type: 'IssueRefresh', data: { familyId, jti, userId: 'u', now: at(0), ip: null, userAgent: null } }, ctx, clock, { cache }))
        .state,
    );
    const first = jti;
    for (let i = 1; i <= 300; i++) {
      now = T0 + i * 10_000;
      const newJti = randomUUID();
      const rotated = await handleCommand(
        store,
        sessionDecider,
        stream,
        { type: 'RotateRefresh', data: { familyId, jti, newJti, now: new Date(now).toISOString(), ip: null, userAgent: null } },
        ctx,
        clock,
        { cache },
      );
      expect(rotated.events.map((e) => e.type)).toEqual(['RefreshRotated', 'RefreshIssued']);
      keep(rotated.state);
      jti = newJti;
      // Every few rotations the cache is dropped: a cold fold of the whole stream, in batches.
      if (i % 97 === 0) cache.forget(stream);
    }
    // Reuse of the first token, long after its rotation: the family is revoked.
    now += 60_000;
    const reuse = await handleCommand(
      store,
      sessionDecider,
      stream,
      { type: 'RotateRefresh', data: { familyId, jti: first, newJti: randomUUID(), now: new Date(now).toISOString(), ip: null, userAgent: null } },
      ctx,
      clock,
      { cache },
    );
    expect(reuse.events.map((e) => e.type)).toEqual(['RefreshReuseDetected', 'RefreshRevoked']);
    keep(reuse.state);

    const recorded: SessionEvent[] = [];
    for await (const e of store.readStream(stream)) recorded.push({ type: e.type, data: e.data } as SessionEvent);
    expect(recorded).toHaveLength(603);
    expect(JSON.stringify(reuse.state)).toBe(JSON.stringify(oneByOne(recorded)));
    expect(JSON.stringify(cached.get(stream)?.state)).toBe(JSON.stringify(reuse.state));
    const final = reuse.state as OpenSession;
    expect(final.revoked).toBe(true);
    expect(Object.values(final.tokens).filter((t) => t.status === 'active')).toEqual([]);
    for (const [i, { state, json }] of handed.entries()) expect({ i, json: JSON.stringify(state) }).toEqual({ i, json });
  }, 60_000);
});
