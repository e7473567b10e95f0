import { UnauthorizedError } from '../../src/domain/errors';
import {
  decideSession,
  evolveSession,
  evolveSessionAll,
  initialSessionState,
  SESSION_MESSAGES,
  type OpenSession,
  type SessionEvent,
  type SessionState,
} from '../../src/domain/session';
import { deepFreeze } from '../../src/infra/eventstore/deep-freeze';
import { mulberry32 } from '../support/prng';

/**
 * Review of `evolveSessionAll` against `evolveSession` on histories the service does not write
 * but a stream may still hold: a RefreshIssued for a jti the family has, events of another
 * family, a rotation before any issue, an issue after the revocation, revocations twice, and
 * jtis named like members of every object (`__proto__`, `toString`, ...). Compared serialized,
 * so the order of the properties counts too, for every split into batches.
 */

const FAMILIES = ['fam-a', 'fam-b'] as const;
const USERS = ['user-a', 'user-b'] as const;
/** Few names, so issues and rotations hit each other; integer-like ones are ordered first by every object. */
const JTIS = ['j1', 'j2', 'j3', '7', '0', 'toString', 'constructor', 'hasOwnProperty', 'valueOf', '__proto__'] as const;

const at = (i: number): string => new Date(Date.parse('2026-11-28T00:00:00.000Z') + i * 1000).toISOString();
const pickOf = <T>(random: () => number, values: readonly T[]): T => values[Math.floor(random() * values.length)] as T;

function history(random: () => number, length: number): SessionEvent[] {
  const events: SessionEvent[] = [];
  for (let i = 0; i < length; i++) {
    const familyId = random() < 0.85 ? FAMILIES[0] : FAMILIES[1];
    const userId = random() < 0.85 ? USERS[0] : USERS[1];
    const jti = pickOf(random, JTIS);
    const pick = random();
    if (pick < 0.4) {
      events.push({ type: 'RefreshIssued', data: { familyId, jti, userId, issuedAt: at(i), expiresAt: at(i + 1000), ip: null, userAgent: null } });
    } else if (pick < 0.8) {
      events.push({ type: 'RefreshRotated', data: { familyId, jti, replacedBy: pickOf(random, JTIS), rotatedAt: at(i) } });
    } else if (pick < 0.88) {
      events.push({ type: 'RefreshReuseDetected', data: { familyId, userId, jti, detectedAt: at(i), ip: null, userAgent: null } });
    } else {
      events.push({ type: 'RefreshRevoked', data: { familyId, userId, reason: random() < 0.5 ? 'logout' : 'reuse', revokedAt: at(i) } });
    }
  }
  return events;
}

/** The state as text (property order included) and the prototype of its tokens. */
function shape(state: SessionState): { json: string; tokensPrototype: object | null } {
  return { json: JSON.stringify(state), tokensPrototype: state.exists ? (Object.getPrototypeOf(state.tokens) as object | null) : Object.prototype };
}

function issuedAt(jti: string, familyId: string = FAMILIES[0]): SessionEvent {
  return { type: 'RefreshIssued', data: { familyId, jti, userId: USERS[0], issuedAt: at(0), expiresAt: at(1000), ip: null, userAgent: null } };
}

describe('evolveSessionAll on odd histories: what evolveSession gives, serialized', () => {
  test.each(Array.from({ length: 60 }, (_, i) => i + 1))('seed %i, in random batches, from the start and from a frozen fold', (seed) => {
    const random = mulberry32(seed * 7919);
    const events = history(random, 1 + Math.floor(random() * 200));
    const oneByOne = (upTo: number): SessionState => events.slice(0, upTo).reduce(evolveSession, initialSessionState());
    expect(shape(evolveSessionAll(initialSessionState(), events))).toEqual(shape(oneByOne(events.length)));

    let state: SessionState = deepFreeze(initialSessionState());
    for (let i = 0; i < events.length; ) {
      const size = Math.floor(random() * 12); // empty batches too
      state = deepFreeze(evolveSessionAll(state, events.slice(i, i + size)));
      i = Math.min(events.length, i + size);
      expect({ seed, i, ...shape(state) }).toEqual({ seed, i, ...shape(oneByOne(i)) });
    }
  });

  test('a jti named `__proto__` is a token of its own, through issue, rotation and revocation, in one batch or one by one', () => {
    const events: SessionEvent[] = [
      issuedAt('j1'),
      issuedAt('__proto__'),
      { type: 'RefreshRotated', data: { familyId: FAMILIES[0], jti: '__proto__', replacedBy: 'j2', rotatedAt: at(1) } },
      issuedAt('j2'),
      { type: 'RefreshRevoked', data: { familyId: FAMILIES[0], userId: USERS[0], reason: 'logout', revokedAt: at(2) } },
    ];
    for (const state of [evolveSessionAll(initialSessionState(), events), events.reduce(evolveSession, initialSessionState())]) {
      const tokens = (state as OpenSession).tokens;
      expect(Object.getPrototypeOf(tokens)).toBe(Object.prototype);
      expect(Object.keys(tokens)).toEqual(['j1', '__proto__', 'j2']);
      expect(Object.entries(tokens).map(([jti, t]) => [jti, t.status])).toEqual([
        ['j1', 'revoked'],
        ['__proto__', 'rotated'],
        ['j2', 'revoked'],
      ]);
    }
  });

  test('a rotation of a jti the family never had changes nothing, whatever its name', () => {
    const start = evolveSession(initialSessionState(), issuedAt('j1'));
    for (const jti of ['toString', 'constructor', 'hasOwnProperty', '__proto__', 'unknown']) {
      const rotation: SessionEvent = { type: 'RefreshRotated', data: { familyId: FAMILIES[0], jti, replacedBy: 'j2', rotatedAt: at(1) } };
      expect({ jti, json: JSON.stringify(evolveSession(start, rotation)) }).toEqual({ jti, json: JSON.stringify(start) });
      expect({ jti, json: JSON.stringify(evolveSessionAll(start, [rotation])) }).toEqual({ jti, json: JSON.stringify(start) });
    }
  });

  test('presenting a jti the family never had is an invalid token, whatever its name', () => {
    const start = evolveSession(initialSessionState(), issuedAt('j1'));
    for (const jti of ['toString', 'constructor', 'hasOwnProperty', '__proto__']) {
      const decide = (): unknown =>
        decideSession({ type: 'RotateRefresh', data: { familyId: FAMILIES[0], jti, newJti: 'j9', now: at(2), ip: null, userAgent: null } }, start);
      expect(decide).toThrow(UnauthorizedError);
      expect(decide).toThrow(SESSION_MESSAGES.invalid);
    }
  });
});
