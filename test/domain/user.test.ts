import { BadRequestError, ConflictError, ForbiddenError, NotFoundError } from '../../src/domain/errors';
import {
  type ChangePassword,
  type ConfirmPasswordReset,
  type CrmFields,
  EMPTY_CRM,
  type PasswordChanged,
  type RequestPasswordReset,
  type SyncCustomer,
  type UserCommand,
  type UserEvent,
  type UserErased,
  type UserSynced,
  USER_MESSAGES,
  UserErasedError,
  roleForEmail,
  userDecider,
} from '../../src/domain/user';
import { spec } from '../support/decider-spec';

const userId = '7b0c1f62-3f0e-4a57-9a61-0d1c9d3b2a11';
const T0 = '2025-01-01T10:00:00.000Z';
const T1 = '2025-01-01T10:05:00.000Z';
const T2 = '2025-01-01T10:30:00.000Z';
const ONE_HOUR_AFTER_T1 = '2025-01-01T11:05:00.000Z';

const fullCrm: CrmFields = {
  userId: 42,
  companyName: 'Acme GmbH',
  userType: 2,
  mrr: '1234.50',
  contractLanguage: 'de',
  createdBy: 7,
  status: 1,
};

function sync(overrides: Partial<SyncCustomer['data']> = {}): SyncCustomer {
  return {
    type: 'SyncCustomer',
    data: {
      userId,
      syncId: 1001,
      email: 'jane@example.com',
      firstName: 'Jane',
      lastName: 'Doe',
      active: true,
      crm: fullCrm,
      now: T0,
      ...overrides,
    },
  };
}

function created(overrides: Partial<UserSynced['data']> = {}): UserSynced {
  return {
    type: 'UserSynced',
    data: {
      userId,
      created: true,
      syncId: 1001,
      email: 'jane@example.com',
      firstName: 'Jane',
      lastName: 'Doe',
      isEmailVerified: false,
      profile: { avatar: null, timezone: 'UTC', language: 'de' },
      crm: fullCrm,
      syncedAt: T0,
      ...overrides,
    },
  };
}

function updated(overrides: Partial<UserSynced['data']> = {}): UserSynced {
  return created({ created: false, syncedAt: T1, ...overrides });
}

const deactivated = (at = T1): UserEvent => ({
  type: 'UserDeactivated',
  data: { userId, reason: 'crm', deactivatedAt: at },
});

const reactivated = (at = T1): UserEvent => ({
  type: 'UserReactivated',
  data: { userId, reason: 'crm', reactivatedAt: at },
});

const changePassword = (now = T1): ChangePassword => ({ type: 'ChangePassword', data: { userId, now } });

const requestReset = (resetTokenHash = 'hash-of-token-1', now = T1): RequestPasswordReset => ({
  type: 'RequestPasswordReset',
  data: { userId, resetTokenHash, now },
});

const resetRequested = (resetTokenHash = 'hash-of-token-1', at = T1, expiresAt = ONE_HOUR_AFTER_T1): UserEvent => ({
  type: 'PasswordResetRequested',
  data: { userId, resetTokenHash, requestedAt: at, expiresAt },
});

const confirmReset = (resetTokenHash = 'hash-of-token-1', now = T2): ConfirmPasswordReset => ({
  type: 'ConfirmPasswordReset',
  data: { userId, resetTokenHash, now },
});

const passwordChanged = (reason: 'change' | 'reset', passwordVersion: number, at: string): PasswordChanged => ({
  type: 'PasswordChanged',
  data: { userId, reason, passwordVersion, changedAt: at },
});

const user = spec(userDecider);

describe('SyncCustomer', () => {
  it('creates an unknown customer with every CRM field mapped, profile language from the contract', () => {
    user.given([]).when(sync()).then([created()]);
  });

  it('creates with empty CRM fields and no language when the optional fields are absent', () => {
    user
      .given([])
      .when(sync({ crm: undefined }))
      .then([created({ crm: EMPTY_CRM, profile: { avatar: null, timezone: 'UTC', language: null } })]);
  });

  it('keeps mrr as the decimal string it was given', () => {
    const { state } = user.given([]).when(sync({ crm: { mrr: '0.10' } })).result();
    expect(state.exists && state.crm.mrr).toBe('0.10');
  });

  it('creates an inactive user when the CRM says active: false', () => {
    user.given([]).when(sync({ active: false })).then([created(), deactivated(T0)]);
  });

  it('emits nothing when nothing changed', () => {
    user.given([created()]).when(sync({ now: T1 })).thenNothing();
  });

  it('updates names and keeps the creation time', () => {
    const result = user.given([created()]).when(sync({ firstName: 'Janet', now: T1 })).result();
    expect(result.events).toEqual([updated({ firstName: 'Janet' })]);
    expect(result.state.exists && result.state.createdAt).toBe(T0);
    expect(result.state.exists && result.state.updatedAt).toBe(T1);
  });

  it('changes the e-mail of a known customer and marks it unverified again', () => {
    user
      .given([created(), passwordChanged('reset', 1, T0), { type: 'EmailVerified', data: { userId, email: 'jane@example.com', verifiedAt: T0 } }])
      .when(sync({ email: 'jane.doe@example.com', now: T1 }))
      .then([updated({ email: 'jane.doe@example.com', isEmailVerified: false })]);
  });

  it('keeps a verified e-mail verified when other fields change', () => {
    user
      .given([created(), { type: 'EmailVerified', data: { userId, email: 'jane@example.com', verifiedAt: T0 } }])
      .when(sync({ lastName: 'Roe', now: T1 }))
      .then([updated({ lastName: 'Roe', isEmailVerified: true })]);
  });

  it('keeps CRM fields left out, clears those sent as null', () => {
    user
      .given([created()])
      .when(sync({ crm: { companyName: null, status: 3 }, now: T1 }))
      .then([updated({ crm: { ...fullCrm, companyName: null, status: 3 } })]);
  });

  it('does not overwrite a language the user already has', () => {
    user
      .given([created()])
      .when(sync({ crm: { contractLanguage: 'fr' }, now: T1 }))
      .then([updated({ crm: { ...fullCrm, contractLanguage: 'fr' } })]);
  });

  it('fills a missing language from a later contract language', () => {
    user
      .given([created({ crm: EMPTY_CRM, profile: { avatar: null, timezone: 'UTC', language: null } })])
      .when(sync({ crm: { contractLanguage: 'nl' }, now: T1 }))
      .then([
        updated({
          crm: { ...EMPTY_CRM, contractLanguage: 'nl' },
          profile: { avatar: null, timezone: 'UTC', language: 'nl' },
        }),
      ]);
  });

  it('deactivates an active user with active: false, and only once', () => {
    user.given([created()]).when(sync({ active: false, now: T1 })).then([deactivated(T1)]);
    user.given([created(), deactivated()]).when(sync({ active: false, now: T2 })).thenNothing();
  });

  it('reactivates an inactive user with active: true, and only once', () => {
    user.given([created(), deactivated()]).when(sync({ now: T2 })).then([reactivated(T2)]);
    user.given([created(), deactivated(), reactivated()]).when(sync({ now: T2 })).thenNothing();
  });

  it('updates and reactivates in one sync', () => {
    user
      .given([created(), deactivated()])
      .when(sync({ lastName: 'Roe', now: T2 }))
      .then([updated({ lastName: 'Roe', syncedAt: T2 }), reactivated(T2)]);
  });

  it('refuses a stream that belongs to another CRM customer', () => {
    user
      .given([created()])
      .when(sync({ syncId: 2002, now: T1 }))
      .thenThrows(ConflictError, 'Email already exists with a different sync_id');
  });

  it('tracks activity in the state', () => {
    const afterDeactivation = user.given([created()]).when(sync({ active: false, now: T1 })).result().state;
    expect(afterDeactivation.exists && afterDeactivation.isActive).toBe(false);
    const afterReactivation = user.given([created(), deactivated()]).when(sync({ now: T2 })).result().state;
    expect(afterReactivation.exists && afterReactivation.isActive).toBe(true);
  });
});

describe('an erased user', () => {
  const erased: UserErased = { type: 'UserErased', data: { userId, syncId: 1001, reason: 'crm', devices: [], erasedAt: T1 } };

  it('takes nothing more: a sync of them (decided after UserErased) is refused, their stream ends with UserErased', () => {
    user.given([created(), erased]).when(sync({ now: T2 })).thenThrows(UserErasedError, USER_MESSAGES.erasedConcurrently);
    user.given([created(), erased]).when(sync({ firstName: 'Janet', active: false, now: T2 })).thenThrows(UserErasedError, USER_MESSAGES.erasedConcurrently);
  });

  it('is not erased twice, and no other command of theirs appends', () => {
    user.given([created(), erased]).when({ type: 'EraseUser', data: { userId, reason: 'self', devices: [], now: T2 } }).thenNothing();
    user.given([created(), erased]).when({ type: 'RequestPasswordReset', data: { userId, resetTokenHash: 'h', now: T2 } }).thenNothing();
    user.given([created(), erased]).when({ type: 'ChangePassword', data: { userId, now: T2 } }).thenThrows(NotFoundError, USER_MESSAGES.notFound);
  });
});

describe('roleForEmail', () => {
  it('is admin only for listed e-mails, case-insensitively', () => {
    expect(roleForEmail('Boss@Example.com', ['ops@example.com', ' boss@example.com'])).toBe('admin');
    expect(roleForEmail('jane@example.com', ['boss@example.com'])).toBe('user');
    expect(roleForEmail('jane@example.com', [])).toBe('user');
  });
});

describe('ChangePassword', () => {
  it('bumps the password version, with no hash in the event', () => {
    user.given([created()]).when(changePassword()).then([passwordChanged('change', 1, T1)]);
    user
      .given([created(), passwordChanged('change', 1, T1)])
      .when(changePassword(T2))
      .then([passwordChanged('change', 2, T2)]);
  });

  it('refuses an unknown user', () => {
    user.given([]).when(changePassword()).thenThrows(NotFoundError, 'User not found');
  });

  it('refuses an inactive user', () => {
    user.given([created(), deactivated()]).when(changePassword(T2)).thenThrows(ForbiddenError, 'Account is inactive');
  });

  it('spends a pending reset token', () => {
    user
      .given([created(), resetRequested(), passwordChanged('change', 1, T1)])
      .when(confirmReset())
      .thenThrows(BadRequestError, 'Invalid or expired reset token');
  });
});

describe('RequestPasswordReset', () => {
  it('records only the hash of the token, valid for one hour', () => {
    user.given([created()]).when(requestReset()).then([resetRequested()]);
  });

  it('emits nothing for an unknown user (the endpoint answers 202 anyway)', () => {
    user.given([]).when(requestReset()).thenNothing();
  });

  it('emits nothing for an inactive user', () => {
    user.given([created(), deactivated()]).when(requestReset('h', T2)).thenNothing();
  });
});

describe('ConfirmPasswordReset', () => {
  const verified: UserEvent = { type: 'EmailVerified', data: { userId, email: 'jane@example.com', verifiedAt: T2 } };

  it('sets a new password version and verifies the e-mail', () => {
    user.given([created(), resetRequested()]).when(confirmReset()).then([passwordChanged('reset', 1, T2), verified]);
  });

  it('does not verify an already verified e-mail twice', () => {
    user
      .given([created(), verified, resetRequested()])
      .when(confirmReset())
      .then([passwordChanged('reset', 1, T2)]);
  });

  it('is single use', () => {
    user
      .given([created(), resetRequested(), passwordChanged('reset', 1, T2)])
      .when(confirmReset('hash-of-token-1', T2))
      .thenThrows(BadRequestError, 'Invalid or expired reset token');
  });

  it('marks the reset used in the state', () => {
    const { state } = user.given([created(), resetRequested()]).when(confirmReset()).result();
    expect(state.exists && state.pendingReset?.used).toBe(true);
    expect(state.exists && state.passwordVersion).toBe(1);
  });

  it('refuses an unknown token', () => {
    user
      .given([created(), resetRequested()])
      .when(confirmReset('hash-of-another-token'))
      .thenThrows(BadRequestError, 'Invalid or expired reset token');
  });

  it('is ended by an e-mail change: the token went to the old mailbox', () => {
    user
      .given([created(), resetRequested(), updated({ email: 'jane.new@example.com' })])
      .when(confirmReset())
      .thenThrows(BadRequestError, 'Invalid or expired reset token');
  });

  it('survives a sync that keeps the e-mail', () => {
    user
      .given([created(), resetRequested(), updated({ firstName: 'Janet' })])
      .when(confirmReset())
      .then([passwordChanged('reset', 1, T2), verified]);
  });

  it('refuses when no reset was requested', () => {
    user.given([created()]).when(confirmReset()).thenThrows(BadRequestError, 'Invalid or expired reset token');
  });

  it('accepts a token until just before its hour is up, refuses it from then on', () => {
    user
      .given([created(), resetRequested()])
      .when(confirmReset('hash-of-token-1', '2025-01-01T11:04:59.999Z'))
      .then([passwordChanged('reset', 1, '2025-01-01T11:04:59.999Z'), { ...verified, data: { ...verified.data, verifiedAt: '2025-01-01T11:04:59.999Z' } }]);
    user
      .given([created(), resetRequested()])
      .when(confirmReset('hash-of-token-1', ONE_HOUR_AFTER_T1))
      .thenThrows(BadRequestError, 'Invalid or expired reset token');
  });

  it('only the latest requested token is valid', () => {
    const history = [created(), resetRequested('hash-1'), resetRequested('hash-2')];
    user.given(history).when(confirmReset('hash-1')).thenThrows(BadRequestError, 'Invalid or expired reset token');
    user.given(history).when(confirmReset('hash-2')).then([passwordChanged('reset', 1, T2), verified]);
  });

  it('refuses an unknown user with the same message', () => {
    user.given([]).when(confirmReset()).thenThrows(BadRequestError, 'Invalid or expired reset token');
  });

  it('refuses once the user is deactivated, even after reactivation', () => {
    user
      .given([created(), resetRequested(), deactivated(T1)])
      .when(confirmReset())
      .thenThrows(BadRequestError, 'Invalid or expired reset token');
    user
      .given([created(), resetRequested(), deactivated(T1), reactivated(T1)])
      .when(confirmReset())
      .thenThrows(BadRequestError, 'Invalid or expired reset token');
  });
});

describe('no secret in any user event', () => {
  it('never carries a password, a hash of one, or a reset token', () => {
    const resetToken = 'plain-reset-token-5f1e9c';
    const password = 'Correct-Horse-Battery-Staple-1';
    const resetTokenHash = 'sha256-of-plain-reset-token';
    const events: UserEvent[] = [];
    const step = (command: UserCommand): void => {
      events.push(...user.given(events).when(command).result().events);
    };
    step(sync());
    step(requestReset(resetTokenHash, T1));
    step(confirmReset(resetTokenHash, T2));
    step(changePassword(T2));
    step(sync({ active: false, now: T2 }));

    expect(events.map((e) => e.type)).toEqual([
      'UserSynced',
      'PasswordResetRequested',
      'PasswordChanged',
      'EmailVerified',
      'PasswordChanged',
      'UserDeactivated',
    ]);
    const json = JSON.stringify(events);
    expect(json).not.toContain(resetToken);
    expect(json).not.toContain(password);
    expect(json).not.toMatch(/"password"|"passwordHash"|"hash"|"token"|"resetToken"/i);
    const passwordEvents = events.filter((e) => e.type === 'PasswordChanged');
    for (const e of passwordEvents) {
      expect(Object.keys(e.data).sort()).toEqual(['changedAt', 'passwordVersion', 'reason', 'userId']);
    }
  });
});

describe('the given/when/then helper', () => {
  it('fails on other events, on an unexpected error, and when nothing is thrown', () => {
    expect(() => user.given([]).when(sync()).then([])).toThrow();
    expect(() => user.given([]).when(sync()).thenNothing()).toThrow();
    expect(() => user.given([]).when(sync()).thenThrows(ConflictError)).toThrow();
    expect(() => user.given([]).when(changePassword()).thenThrows(ForbiddenError)).toThrow();
    expect(() => user.given([]).when(changePassword()).thenThrows(NotFoundError, 'Another message')).toThrow();
    expect(() => user.given([]).when(changePassword()).thenThrows(NotFoundError, 'User not found')).not.toThrow();
  });
});
