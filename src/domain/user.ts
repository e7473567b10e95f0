/**
 * The user aggregate, stream `user-<userId>`: its decider. Its state, commands and events
 * are in `user-model.ts` (re-exported here, so `./user` is the one place to import from).
 *
 * Users are created and updated by the CRM (`SyncCustomer`).
 *
 * The role (`user` | `admin`) is not decided here: it follows from `ADMIN_EMAILS`, which is
 * configuration, so `roleForEmail` is applied where a role is read (login, /users/me).
 * Recording it in events would freeze a configuration value into history and leave a
 * changed `ADMIN_EMAILS` without effect until the CRM happened to re-sync the user.
 */
import type { Decider } from './messages';
import { BadRequestError, ConflictError, ForbiddenError, NotFoundError } from './errors';
import {
  DEFAULT_TIMEZONE,
  EMPTY_CRM,
  PASSWORD_RESET_TTL_SECONDS,
  USER_MESSAGES,
  UserErasedError,
  type ChangePassword,
  type ConfirmPasswordReset,
  type CrmFields,
  type ExistingUser,
  type RequestPasswordReset,
  type SyncCustomer,
  type UserCommand,
  type UserEvent,
  type UserProfile,
  type UserState,
} from './user-model';

export * from './user-model';

// ---------------------------------------------------------------------------------------
// Decide

function plusSeconds(iso: string, seconds: number): string {
  // Pure date arithmetic on a time the command carries, not a clock read.
  return new Date(Date.parse(iso) + seconds * 1000).toISOString();
}

function mergeCrm(current: CrmFields, update: Partial<CrmFields> | undefined): CrmFields {
  if (update === undefined) return current;
  const pick = <K extends keyof CrmFields>(key: K): CrmFields[K] => {
    const value = update[key];
    return value === undefined ? current[key] : value;
  };
  return {
    userId: pick('userId'),
    companyName: pick('companyName'),
    userType: pick('userType'),
    mrr: pick('mrr'),
    contractLanguage: pick('contractLanguage'),
    createdBy: pick('createdBy'),
    status: pick('status'),
  };
}

function sameCrm(a: CrmFields, b: CrmFields): boolean {
  return (Object.keys(a) as (keyof CrmFields)[]).every((key) => a[key] === b[key]);
}

function sameProfile(a: UserProfile, b: UserProfile): boolean {
  return a.avatar === b.avatar && a.timezone === b.timezone && a.language === b.language;
}

function decideSync(command: SyncCustomer, state: UserState): UserEvent[] {
  const c = command.data;

  // A sync that found this user live and decides after their erasure: the user is gone.
  if (!state.exists && state.erased === true) throw new UserErasedError();
  if (!state.exists) {
    const crm = mergeCrm(EMPTY_CRM, c.crm);
    const events: UserEvent[] = [
      {
        type: 'UserSynced',
        data: {
          userId: c.userId,
          created: true,
          syncId: c.syncId,
          email: c.email,
          firstName: c.firstName,
          lastName: c.lastName,
          isEmailVerified: false,
          profile: { avatar: null, timezone: DEFAULT_TIMEZONE, language: languageOf(crm.contractLanguage) },
          crm,
          syncedAt: c.now,
        },
      },
    ];
    if (!c.active) {
      events.push({ type: 'UserDeactivated', data: { userId: c.userId, reason: 'crm', deactivatedAt: c.now } });
    }
    return events;
  }

  if (state.syncId !== c.syncId) throw new ConflictError(USER_MESSAGES.emailTakenBySyncId);

  const crm = mergeCrm(state.crm, c.crm);
  const profile: UserProfile =
    state.profile.language === null && languageOf(crm.contractLanguage) !== null
      ? { ...state.profile, language: languageOf(crm.contractLanguage) }
      : state.profile;
  const emailChanged = c.email !== state.email;
  const changed =
    emailChanged ||
    c.firstName !== state.firstName ||
    c.lastName !== state.lastName ||
    !sameCrm(crm, state.crm) ||
    !sameProfile(profile, state.profile);

  const events: UserEvent[] = [];
  if (changed) {
    events.push({
      type: 'UserSynced',
      data: {
        userId: state.userId,
        created: false,
        syncId: c.syncId,
        email: c.email,
        firstName: c.firstName,
        lastName: c.lastName,
        isEmailVerified: emailChanged ? false : state.isEmailVerified,
        profile,
        crm,
        syncedAt: c.now,
      },
    });
  }
  if (c.active && !state.isActive) {
    events.push({ type: 'UserReactivated', data: { userId: state.userId, reason: 'crm', reactivatedAt: c.now } });
  }
  if (!c.active && state.isActive) {
    events.push({ type: 'UserDeactivated', data: { userId: state.userId, reason: 'crm', deactivatedAt: c.now } });
  }
  return events;
}

function requireActiveUser(state: UserState): ExistingUser {
  if (!state.exists) throw new NotFoundError(USER_MESSAGES.notFound);
  if (!state.isActive) throw new ForbiddenError(USER_MESSAGES.inactive);
  return state;
}

function decideChangePassword(command: ChangePassword, state: UserState): UserEvent[] {
  const user = requireActiveUser(state);
  return [
    {
      type: 'PasswordChanged',
      data: {
        userId: user.userId,
        reason: 'change',
        passwordVersion: user.passwordVersion + 1,
        changedAt: command.data.now,
      },
    },
  ];
}

/**
 * No events for an unknown or inactive user: the endpoint answers 202 either way and
 * sends no mail when nothing was appended.
 */
function decideRequestReset(command: RequestPasswordReset, state: UserState): UserEvent[] {
  if (!state.exists || !state.isActive) return [];
  const { resetTokenHash, now } = command.data;
  return [
    {
      type: 'PasswordResetRequested',
      data: {
        userId: state.userId,
        resetTokenHash,
        requestedAt: now,
        expiresAt: plusSeconds(now, PASSWORD_RESET_TTL_SECONDS),
      },
    },
  ];
}

function decideConfirmReset(command: ConfirmPasswordReset, state: UserState): UserEvent[] {
  const { resetTokenHash, now } = command.data;
  if (!state.exists || !state.isActive) throw new BadRequestError(USER_MESSAGES.invalidResetToken);
  const pending = state.pendingReset;
  if (
    pending === null ||
    pending.used ||
    pending.resetTokenHash !== resetTokenHash ||
    Date.parse(now) >= Date.parse(pending.expiresAt)
  ) {
    throw new BadRequestError(USER_MESSAGES.invalidResetToken);
  }
  const events: UserEvent[] = [
    {
      type: 'PasswordChanged',
      data: { userId: state.userId, reason: 'reset', passwordVersion: state.passwordVersion + 1, changedAt: now },
    },
  ];
  if (!state.isEmailVerified) {
    events.push({ type: 'EmailVerified', data: { userId: state.userId, email: state.email, verifiedAt: now } });
  }
  return events;
}

/** The profile language a contract language gives: none for a blank one (the profile keeps its default, `en`). */
function languageOf(contractLanguage: string | null): string | null {
  const language = contractLanguage?.trim() ?? '';
  return language === '' ? null : language;
}

export function decideUser(command: UserCommand, state: UserState): UserEvent[] {
  switch (command.type) {
    case 'SyncCustomer':
      return decideSync(command, state);
    case 'ChangePassword':
      return decideChangePassword(command, state);
    case 'RequestPasswordReset':
      return decideRequestReset(command, state);
    case 'ConfirmPasswordReset':
      return decideConfirmReset(command, state);
    case 'EraseUser':
      if (!state.exists) return [];
      return [
        {
          type: 'UserErased',
          data: {
            userId: state.userId,
            syncId: state.syncId,
            reason: command.data.reason,
            devices: command.data.devices,
            erasedAt: command.data.now,
          },
        },
      ];
    default: {
      const _exhaustive: never = command;
      return _exhaustive;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Evolve

export function initialUserState(): UserState {
  return { exists: false };
}

export function evolveUser(state: UserState, event: UserEvent): UserState {
  if (event.type === 'UserSynced') {
    const e = event.data;
    const base = state.exists
      ? state
      : {
          exists: true as const,
          userId: e.userId,
          isActive: true,
          createdAt: e.syncedAt,
          passwordVersion: 0,
          pendingReset: null,
        };
    // A new e-mail ends any pending reset token: it was sent to the old mailbox.
    const emailChanged = state.exists && state.email !== e.email;
    return {
      ...base,
      ...(emailChanged ? { pendingReset: null } : {}),
      syncId: e.syncId,
      email: e.email,
      firstName: e.firstName,
      lastName: e.lastName,
      isEmailVerified: e.isEmailVerified,
      profile: e.profile,
      crm: e.crm,
      updatedAt: e.syncedAt,
    };
  }
  if (!state.exists) return state;

  switch (event.type) {
    case 'UserDeactivated':
      // A pending reset dies with the account's activity; a reactivated user asks again.
      return { ...state, isActive: false, pendingReset: null, updatedAt: event.data.deactivatedAt };
    case 'UserReactivated':
      return { ...state, isActive: true, updatedAt: event.data.reactivatedAt };
    case 'PasswordChanged':
      // Any new password spends the pending reset token.
      return {
        ...state,
        passwordVersion: event.data.passwordVersion,
        pendingReset: state.pendingReset === null ? null : { ...state.pendingReset, used: true },
        updatedAt: event.data.changedAt,
      };
    case 'PasswordResetRequested':
      // Only the latest token is valid.
      return {
        ...state,
        pendingReset: { resetTokenHash: event.data.resetTokenHash, expiresAt: event.data.expiresAt, used: false },
      };
    case 'EmailVerified':
      return { ...state, isEmailVerified: true, updatedAt: event.data.verifiedAt };
    case 'UserErased':
      return { exists: false, erased: true };
    case 'EmailClaimWithdrawn':
      // Nothing of the user changes: the stream only moves past a sync decided before it.
      return state;
    default: {
      const _exhaustive: never = event;
      return _exhaustive;
    }
  }
}

export const userDecider: Decider<UserState, UserCommand, UserEvent> = {
  initialState: initialUserState,
  evolve: evolveUser,
  decide: decideUser,
};
