import { ConflictError, UnauthorizedError } from '../../src/domain/errors';
import {
  type RefreshIssued,
  type RevokeReason,
  type RotateRefresh,
  type SessionCommand,
  type SessionEvent,
  rotationOutcome,
  sessionDecider,
} from '../../src/domain/session';
import { spec } from '../support/decider-spec';

const familyId = 'fam-1';
const userId = 'user-1';
const T0 = '2025-05-01T12:00:00.000Z';
const T1 = '2025-05-02T12:00:00.000Z';
const T2 = '2025-05-03T12:00:00.000Z';
const THIRTY_DAYS_AFTER_T0 = '2025-05-31T12:00:00.000Z';
const THIRTY_DAYS_AFTER_T1 = '2025-06-01T12:00:00.000Z';
const client: { ip: string | null; userAgent: string | null } = { ip: '203.0.113.7', userAgent: 'HomeHubApp/3.1' };

const session = spec(sessionDecider);

const issue = (overrides: Partial<Extract<SessionCommand, { type: 'IssueRefresh' }>['data']> = {}): SessionCommand => ({
  type: 'IssueRefresh',
  data: { familyId, jti: 'jti-1', userId, now: T0, ...client, ...overrides },
});

function rotate(jti: string, newJti: string, now: string, from = client): RotateRefresh {
  return { type: 'RotateRefresh', data: { familyId, jti, newJti, now, ...from } };
}

const revoke = (reason: RevokeReason, now = T2): SessionCommand => ({ type: 'RevokeFamily', data: { familyId, reason, now } });

function issued(jti: string, at: string, expiresAt: string, from = client): RefreshIssued {
  return { type: 'RefreshIssued', data: { familyId, jti, userId, issuedAt: at, expiresAt, ...from } };
}

const rotated = (jti: string, replacedBy: string, at: string): SessionEvent => ({
  type: 'RefreshRotated',
  data: { familyId, jti, replacedBy, rotatedAt: at },
});

const revoked = (reason: RevokeReason, at: string): SessionEvent => ({
  type: 'RefreshRevoked',
  data: { familyId, userId, reason, revokedAt: at },
});

const reuseDetected = (jti: string, at: string, from = client): SessionEvent => ({
  type: 'RefreshReuseDetected',
  data: { familyId, userId, jti, detectedAt: at, ...from },
});

const login = issued('jti-1', T0, THIRTY_DAYS_AFTER_T0);

describe('IssueRefresh', () => {
  it('opens a family with one active token valid for 30 days', () => {
    session.given([]).when(issue()).then([login]);
    const { state } = session.given([]).when(issue()).result();
    expect(state.exists && state.tokens['jti-1']?.status).toBe('active');
  });

  it('keeps unknown client details as null', () => {
    session
      .given([])
      .when(issue({ ip: null, userAgent: null }))
      .then([issued('jti-1', T0, THIRTY_DAYS_AFTER_T0, { ip: null, userAgent: null })]);
  });

  it('never opens the same family twice', () => {
    session.given([login]).when(issue({ jti: 'jti-x' })).thenThrows(ConflictError);
  });
});

describe('RotateRefresh', () => {
  const mobile = { ip: '198.51.100.4', userAgent: 'HomeHubApp/3.2' };

  it('rotates an active token and issues its successor for another 30 days', () => {
    session
      .given([login])
      .when(rotate('jti-1', 'jti-2', T1, mobile))
      .then([rotated('jti-1', 'jti-2', T1), issued('jti-2', T1, THIRTY_DAYS_AFTER_T1, mobile)]);
  });

  it('reports success with the new token', () => {
    const { events, state } = session.given([login]).when(rotate('jti-1', 'jti-2', T1)).result();
    expect(rotationOutcome(events)).toEqual({ ok: true, issued: issued('jti-2', T1, THIRTY_DAYS_AFTER_T1).data });
    expect(state.exists && [state.tokens['jti-1']?.status, state.tokens['jti-1']?.replacedBy]).toEqual(['rotated', 'jti-2']);
    expect(state.exists && state.tokens['jti-2']?.status).toBe('active');
  });

  it('rotates the successor in turn', () => {
    session
      .given([login, rotated('jti-1', 'jti-2', T1), issued('jti-2', T1, THIRTY_DAYS_AFTER_T1)])
      .when(rotate('jti-2', 'jti-3', T2))
      .then([rotated('jti-2', 'jti-3', T2), issued('jti-3', T2, '2025-06-02T12:00:00.000Z')]);
  });

  describe('reuse of a rotated token', () => {
    const afterRotation = [login, rotated('jti-1', 'jti-2', T1), issued('jti-2', T1, THIRTY_DAYS_AFTER_T1)];
    const attacker = { ip: '192.0.2.66', userAgent: 'curl/8.0' };

    it('records the reuse and revokes the whole family', () => {
      session
        .given(afterRotation)
        .when(rotate('jti-1', 'jti-9', T2, attacker))
        .then([reuseDetected('jti-1', T2, attacker), revoked('reuse', T2)]);
    });

    it('within 5 s of the rotation it is a lost race: 401 Refresh token has been revoked, no event, the family kept', () => {
      const justAfter = new Date(Date.parse(T1) + 4_999).toISOString();
      session.given(afterRotation).when(rotate('jti-1', 'jti-9', justAfter)).thenThrows(UnauthorizedError, 'Refresh token has been revoked');
      const fiveSecondsAfter = new Date(Date.parse(T1) + 5_000).toISOString();
      session
        .given(afterRotation)
        .when(rotate('jti-1', 'jti-9', fiveSecondsAfter))
        .then([reuseDetected('jti-1', fiveSecondsAfter), revoked('reuse', fiveSecondsAfter)]);
    });

    it('reports failure: 401 Refresh token has been revoked', () => {
      const { events } = session.given(afterRotation).when(rotate('jti-1', 'jti-9', T2)).result();
      const outcome = rotationOutcome(events);
      expect(outcome.ok).toBe(false);
      if (outcome.ok) return;
      expect(outcome.error).toBeInstanceOf(UnauthorizedError);
      expect(outcome.error.message).toBe('Refresh token has been revoked');
    });

    it('leaves the legitimate successor revoked too', () => {
      const { state } = session.given(afterRotation).when(rotate('jti-1', 'jti-9', T2)).result();
      expect(state.exists && state.revoked).toBe(true);
      expect(state.exists && state.tokens['jti-2']?.status).toBe('revoked');
      session
        .given([...afterRotation, reuseDetected('jti-1', T2), revoked('reuse', T2)])
        .when(rotate('jti-2', 'jti-10', T2))
        .thenThrows(UnauthorizedError, 'Refresh token has been revoked');
    });

    it('is not detected again once the family is revoked', () => {
      session
        .given([...afterRotation, reuseDetected('jti-1', T2), revoked('reuse', T2)])
        .when(rotate('jti-1', 'jti-11', T2))
        .thenThrows(UnauthorizedError, 'Refresh token has been revoked');
    });
  });

  it('refuses a token of a revoked family', () => {
    session.given([login, revoked('logout', T1)]).when(rotate('jti-1', 'jti-2', T2)).thenThrows(UnauthorizedError, 'Refresh token has been revoked');
  });

  it('refuses an expired token, and accepts it until the last millisecond', () => {
    session.given([login]).when(rotate('jti-1', 'jti-2', THIRTY_DAYS_AFTER_T0)).thenThrows(UnauthorizedError, 'Refresh token has expired');
    const justBefore = '2025-05-31T11:59:59.999Z';
    session
      .given([login])
      .when(rotate('jti-1', 'jti-2', justBefore))
      .then([rotated('jti-1', 'jti-2', justBefore), issued('jti-2', justBefore, '2025-06-30T11:59:59.999Z')]);
  });

  it('refuses an unknown jti or family', () => {
    session.given([login]).when(rotate('jti-unknown', 'jti-2', T1)).thenThrows(UnauthorizedError, 'Invalid refresh token');
    session.given([]).when(rotate('jti-1', 'jti-2', T1)).thenThrows(UnauthorizedError, 'Invalid refresh token');
  });
});

describe('rotationOutcome', () => {
  it('is a failure when the decision issued nothing', () => {
    const outcome = rotationOutcome([]);
    expect(outcome.ok).toBe(false);
    if (!outcome.ok) expect(outcome.error.message).toBe('Invalid refresh token');
  });
});

describe('RevokeFamily', () => {
  it.each<RevokeReason>(['logout', 'reuse', 'password-reset', 'deactivated'])('revokes with reason %s', (reason) => {
    session.given([login]).when(revoke(reason)).then([revoked(reason, T2)]);
  });

  it('revokes every active token, keeps rotated ones as they were', () => {
    const { state } = session
      .given([login, rotated('jti-1', 'jti-2', T1), issued('jti-2', T1, THIRTY_DAYS_AFTER_T1)])
      .when(revoke('logout'))
      .result();
    expect(state.exists && [state.revoked, state.revokedReason]).toEqual([true, 'logout']);
    expect(state.exists && state.tokens['jti-1']?.status).toBe('rotated');
    expect(state.exists && state.tokens['jti-2']?.status).toBe('revoked');
  });

  it('is idempotent: an already revoked family gives no events', () => {
    session.given([login, revoked('logout', T1)]).when(revoke('password-reset')).thenNothing();
  });

  it('gives no events for an unknown family', () => {
    session.given([]).when(revoke('logout')).thenNothing();
  });

  it('makes a later refresh fail', () => {
    session.given([login, revoked('password-reset', T1)]).when(rotate('jti-1', 'jti-2', T1)).thenThrows(UnauthorizedError, 'Refresh token has been revoked');
  });
});

describe('no secret in any session event', () => {
  it('holds jtis, never a refresh token', () => {
    const refreshToken = 'eyJhbGciOiJIUzI1NiJ9.eyJqdGkiOiJqdGktMSJ9.c2lnbmF0dXJl';
    const events: SessionEvent[] = [];
    const step = (command: SessionCommand): void => {
      events.push(...session.given(events).when(command).result().events);
    };
    step(issue());
    step(rotate('jti-1', 'jti-2', T1));
    step(rotate('jti-1', 'jti-3', T2));
    step(revoke('logout'));
    expect(events.map((e) => e.type)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued', 'RefreshReuseDetected', 'RefreshRevoked']);
    const json = JSON.stringify(events);
    expect(json).not.toContain(refreshToken);
    expect(json).not.toMatch(/eyJ|"token"|"refreshToken"/);
  });
});
