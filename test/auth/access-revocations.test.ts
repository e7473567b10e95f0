import { createAccessRevocations } from '../../src/auth/access-revocations';
import type { RecordedEvent } from '../../src/infra/eventstore/port';

/** The in-memory judgement behind 401 `Token has been revoked` for a deactivated account (decisions §3). */

let position = 0n;
function recorded(streamName: string, type: string, data: Record<string, unknown>): RecordedEvent {
  position += 10n;
  return {
    streamName,
    type,
    data,
    id: `e-${position}`,
    revision: 0n,
    position: { commit: position, prepare: position },
    metadata: { occurredAt: new Date(0).toISOString(), actor: { type: 'crm', id: 'crm' }, requestId: 'r', causationId: 'r', correlationId: 'r' },
  } as RecordedEvent;
}

const USER = 'u-1';
const at = (iso: string) => ({ ms: Date.parse(iso), second: Math.floor(Date.parse(iso) / 1000) });

describe('access revocations', () => {
  test('given a deactivation: every token of the user is refused while inactive; other users are untouched', () => {
    const r = createAccessRevocations(() => Date.parse('2026-11-24T10:00:00.500Z'));
    const d = at('2026-11-24T10:00:00.500Z');
    r.apply(recorded(`user-${USER}`, 'UserDeactivated', { userId: USER, reason: 'crm', deactivatedAt: '2026-11-24T10:00:00.500Z' }));
    expect(r.isRevoked({ sub: USER, iat: d.second - 10 })).toBe(true);
    expect(r.isRevoked({ sub: USER, iat: d.second + 10, fam: 'f-new' })).toBe(true);
    expect(r.isRevoked({ sub: 'someone-else', iat: d.second - 10 })).toBe(false);
  });

  test('after a reactivation: tokens from before stay refused, later ones pass; in the very second, the family decides', () => {
    const r = createAccessRevocations(() => Date.parse('2026-11-24T10:00:01Z'));
    const d = at('2026-11-24T10:00:00.500Z');
    r.apply(recorded(`user-${USER}`, 'UserDeactivated', { userId: USER, reason: 'crm', deactivatedAt: '2026-11-24T10:00:00.500Z' }));
    r.apply(recorded('session-f-old', 'RefreshRevoked', { familyId: 'f-old', userId: USER, reason: 'deactivated', revokedAt: '2026-11-24T10:00:00.501Z' }));
    r.apply(recorded(`user-${USER}`, 'UserReactivated', { userId: USER, reason: 'crm', reactivatedAt: '2026-11-24T10:00:00.900Z' }));
    // A login after the reactivation, in the same second: its family was opened after the cut.
    r.apply(recorded('session-f-new', 'RefreshIssued', { familyId: 'f-new', userId: USER, jti: 'j', issuedAt: '2026-11-24T10:00:00.950Z', expiresAt: '2026-12-24T10:00:00.950Z', ip: null, userAgent: null }));
    expect(r.isRevoked({ sub: USER, iat: d.second, fam: 'f-old' })).toBe(true);
    expect(r.isRevoked({ sub: USER, iat: d.second })).toBe(true);
    expect(r.isRevoked({ sub: USER, iat: d.second, fam: 'f-new' })).toBe(false);
    expect(r.isRevoked({ sub: USER, iat: d.second + 1 })).toBe(false);
  });

  test('listeners hear of every deactivation (the tunnel closes sockets with them)', () => {
    const r = createAccessRevocations();
    const heard: string[] = [];
    r.onRevoked((userId) => heard.push(userId));
    r.apply(recorded(`user-${USER}`, 'UserDeactivated', { userId: USER, reason: 'crm', deactivatedAt: new Date().toISOString() }));
    r.apply(recorded('session-f', 'RefreshRevoked', { familyId: 'f', userId: USER, reason: 'logout', revokedAt: new Date().toISOString() }));
    expect(heard).toEqual([USER]);
  });

  test('a reactivated user is forgotten once every token from before has expired; an inactive one is kept', () => {
    let now = Date.parse('2026-11-24T10:00:00Z');
    const r = createAccessRevocations(() => now);
    r.apply(recorded('user-a', 'UserDeactivated', { userId: 'a', reason: 'crm', deactivatedAt: '2026-11-24T10:00:00Z' }));
    r.apply(recorded('user-a', 'UserReactivated', { userId: 'a', reason: 'crm', reactivatedAt: '2026-11-24T10:00:01Z' }));
    r.apply(recorded('user-b', 'UserDeactivated', { userId: 'b', reason: 'crm', deactivatedAt: '2026-11-24T10:00:00Z' }));
    expect(r.size()).toBe(2);
    now += 20 * 60 * 1000;
    r.apply(recorded('user-c', 'UserDeactivated', { userId: 'c', reason: 'crm', deactivatedAt: '2026-11-24T10:20:00Z' }));
    expect(r.size()).toBe(2);
    expect(r.isRevoked({ sub: 'a', iat: Math.floor(Date.parse('2026-11-24T09:59:00Z') / 1000) })).toBe(false);
    expect(r.isRevoked({ sub: 'b', iat: Math.floor(now / 1000) })).toBe(true);
  });
});
