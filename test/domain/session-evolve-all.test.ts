import { randomUUID } from 'node:crypto';
import { evolveSession, evolveSessionAll, initialSessionState, type SessionEvent, type SessionState } from '../../src/domain/session';
import { mulberry32 } from '../support/prng';

/**
 * `evolveSessionAll` folds a batch of session events with one copy of the tokens: it must give
 * exactly what `evolveSession` gives one event at a time, for any history and any split of it
 * into batches, and must never change the state it starts from (a fold may be shared).
 */

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/** A random history of one family: issues, rotations (of known and unknown tokens), reuse, revocations. */
function history(random: () => number, length: number): SessionEvent[] {
  const familyId = randomUUID();
  const userId = randomUUID();
  const jtis: string[] = [];
  const events: SessionEvent[] = [];
  const at = (i: number): string => new Date(Date.parse('2026-11-28T00:00:00.000Z') + i * 1000).toISOString();
  for (let i = 0; i < length; i++) {
    const pick = random();
    const known = jtis[Math.floor(random() * jtis.length)] ?? randomUUID();
    if (pick < 0.35 || jtis.length === 0) {
      const jti = randomUUID();
      jtis.push(jti);
      events.push({ type: 'RefreshIssued', data: { familyId, jti, userId, issuedAt: at(i), expiresAt: at(i + 1000), ip: null, userAgent: null } });
    } else if (pick < 0.8) {
      events.push({ type: 'RefreshRotated', data: { familyId, jti: random() < 0.9 ? known : randomUUID(), replacedBy: randomUUID(), rotatedAt: at(i) } });
    } else if (pick < 0.9) {
      events.push({ type: 'RefreshReuseDetected', data: { familyId, userId, jti: known, detectedAt: at(i), ip: null, userAgent: null } });
    } else {
      events.push({ type: 'RefreshRevoked', data: { familyId, userId, reason: random() < 0.5 ? 'logout' : 'reuse', revokedAt: at(i) } });
    }
  }
  return events;
}

describe('evolveSessionAll', () => {
  test.each(Array.from({ length: 40 }, (_, i) => i + 1))('seed %i: the same state as one event at a time, in any batches, the start untouched', (seed) => {
    const random = mulberry32(seed);
    const events = history(random, 1 + Math.floor(random() * 120));
    const expected = events.reduce(evolveSession, initialSessionState());
    expect(evolveSessionAll(initialSessionState(), events)).toEqual(expected);

    // Split at random points; every intermediate state is frozen, as a shared fold is (a write to it throws).
    let state: SessionState = deepFreeze(initialSessionState());
    for (let i = 0; i < events.length; ) {
      const size = 1 + Math.floor(random() * 10);
      state = deepFreeze(evolveSessionAll(state, events.slice(i, i + size)));
      expect(state).toEqual(events.slice(0, i + size).reduce(evolveSession, initialSessionState()));
      i += size;
    }
    expect(state).toEqual(expected);
  });

  test('no events: the same state, not a copy', () => {
    const open = evolveSession(initialSessionState(), history(mulberry32(7), 1)[0] as SessionEvent);
    expect(evolveSessionAll(open, [])).toBe(open);
    expect(evolveSessionAll(initialSessionState(), [])).toEqual(initialSessionState());
  });
});
