/**
 * The user aggregate's vocabulary, stream `user-<userId>`: its state, commands and events
 * (the decider that relates them is in `user.ts`, which re-exports all of this).
 *
 * Passwords are never part of an event or of the state: the state keeps a `passwordVersion`
 * counter and the command handler stores the argon2id hash outside the event store, keyed by
 * user and version. A reset token is only ever seen here as its hash.
 */
import type { Command, DomainEvent } from './messages';
import { ConflictError } from './errors';

export const PASSWORD_RESET_TTL_SECONDS = 3600;
export const DEFAULT_TIMEZONE = 'UTC';
/** Shown while neither the user nor the CRM's contract language has set one (decisions §3). */
export const DEFAULT_LANGUAGE = 'en';

export const USER_MESSAGES = {
  notFound: 'User not found',
  inactive: 'Account is inactive',
  emailTakenBySyncId: 'Email already exists with a different sync_id',
  invalidResetToken: 'Invalid or expired reset token',
  /** A sync of a customer whose user was erased while the sync ran: a sync made now creates a new user. */
  erasedConcurrently: 'The customer was erased concurrently, please retry',
} as const;

/** A command that would append to an erased user's stream (409): the user is gone. */
export class UserErasedError extends ConflictError {
  constructor() {
    super(USER_MESSAGES.erasedConcurrently);
    this.name = 'UserErasedError';
  }
}

export type UserRole = 'user' | 'admin';

/** `admin` when the e-mail is listed in ADMIN_EMAILS (compared case-insensitively). */
export function roleForEmail(email: string, adminEmails: readonly string[]): UserRole {
  const normalized = email.trim().toLowerCase();
  return adminEmails.some((admin) => admin.trim().toLowerCase() === normalized) ? 'admin' : 'user';
}

export interface UserProfile {
  readonly avatar: string | null;
  readonly timezone: string;
  /** Null until set; the CRM's contract language fills it when it is null. */
  readonly language: string | null;
}

/** The optional CRM fields of sync-customer, kept on the user as `crm`. */
export interface CrmFields {
  readonly userId: number | null;
  readonly companyName: string | null;
  readonly userType: number | null;
  /** A decimal string (e.g. "1234.50"), never a float. */
  readonly mrr: string | null;
  readonly contractLanguage: string | null;
  readonly createdBy: number | null;
  readonly status: number | null;
}

export const EMPTY_CRM: CrmFields = {
  userId: null,
  companyName: null,
  userType: null,
  mrr: null,
  contractLanguage: null,
  createdBy: null,
  status: null,
};

export interface PendingReset {
  readonly resetTokenHash: string;
  readonly expiresAt: string;
  readonly used: boolean;
}

export interface ExistingUser {
  readonly exists: true;
  readonly userId: string;
  readonly syncId: number;
  readonly email: string;
  readonly firstName: string;
  readonly lastName: string;
  readonly isActive: boolean;
  readonly isEmailVerified: boolean;
  readonly profile: UserProfile;
  readonly crm: CrmFields;
  readonly createdAt: string;
  readonly updatedAt: string;
  /** 0 = no password of the user's own (a synced user); +1 on every change. */
  readonly passwordVersion: number;
  readonly pendingReset: PendingReset | null;
}

/**
 * No user: never created, or erased (`erased`: the stream ends with `UserErased`). Nothing is
 * ever appended to an erased user's stream again; a later sync of their CRM id creates a new user.
 */
export type UserState = { readonly exists: false; readonly erased?: true } | ExistingUser;

// ---------------------------------------------------------------------------------------
// Commands

export type SyncCustomer = Command<
  'SyncCustomer',
  {
    /** The user's id: the existing one, or a freshly generated UUID when the CRM id is new. */
    readonly userId: string;
    /** The CRM customer id (`id` of the body). */
    readonly syncId: number;
    /** Expected normalized (trimmed, lower-case) by the edge. */
    readonly email: string;
    readonly firstName: string;
    readonly lastName: string;
    readonly active: boolean;
    /**
     * The optional CRM fields. A field left out keeps its previous value; an explicit null
     * clears it.
     */
    readonly crm?: Partial<CrmFields>;
    readonly now: string;
  }
>;

export type ChangePassword = Command<'ChangePassword', { readonly userId: string; readonly now: string }>;

export type RequestPasswordReset = Command<
  'RequestPasswordReset',
  { readonly userId: string; readonly resetTokenHash: string; readonly now: string }
>;

export type ConfirmPasswordReset = Command<
  'ConfirmPasswordReset',
  { readonly userId: string; readonly resetTokenHash: string; readonly now: string }
>;

/** Erasure (decisions §11): the user is gone; their personal data goes with their data key. */
export type EraseUser = Command<
  'EraseUser',
  {
    readonly userId: string;
    readonly reason: ErasureReason;
    /**
     * Devices whose data goes with the user's, their keys too: those deleted with them (they were
     * their only owner), and those deleted before while they were their only owner.
     */
    readonly devices: readonly string[];
    readonly now: string;
  }
>;

export type UserCommand = SyncCustomer | ChangePassword | RequestPasswordReset | ConfirmPasswordReset | EraseUser;

// ---------------------------------------------------------------------------------------
// Events

export type UserSynced = DomainEvent<
  'UserSynced',
  {
    readonly userId: string;
    /** True when this sync created the user. */
    readonly created: boolean;
    readonly syncId: number;
    readonly email: string;
    readonly firstName: string;
    readonly lastName: string;
    /** False again when the e-mail changed. */
    readonly isEmailVerified: boolean;
    readonly profile: UserProfile;
    readonly crm: CrmFields;
    /** Also the user's `createdAt` when `created`, and its `updatedAt` in any case. */
    readonly syncedAt: string;
  }
>;

export type UserDeactivated = DomainEvent<
  'UserDeactivated',
  { readonly userId: string; readonly reason: 'crm'; readonly deactivatedAt: string }
>;

export type UserReactivated = DomainEvent<
  'UserReactivated',
  { readonly userId: string; readonly reason: 'crm'; readonly reactivatedAt: string }
>;

export type PasswordChangeReason = 'change' | 'reset';

export type PasswordChanged = DomainEvent<
  'PasswordChanged',
  {
    readonly userId: string;
    readonly reason: PasswordChangeReason;
    /** The version the new hash is stored under. */
    readonly passwordVersion: number;
    readonly changedAt: string;
  }
>;

export type PasswordResetRequested = DomainEvent<
  'PasswordResetRequested',
  {
    readonly userId: string;
    /** A hash of the token sent by mail, never the token. */
    readonly resetTokenHash: string;
    readonly requestedAt: string;
    readonly expiresAt: string;
  }
>;

/** Confirming a reset proves control of the mailbox. */
export type EmailVerified = DomainEvent<
  'EmailVerified',
  { readonly userId: string; readonly email: string; readonly verifiedAt: string }
>;

export type ErasureReason = 'crm' | 'self';

/** Ids only: what is erased is not repeated here. */
export type UserErased = DomainEvent<
  'UserErased',
  {
    readonly userId: string;
    readonly syncId: number;
    readonly reason: ErasureReason;
    readonly devices: readonly string[];
    readonly erasedAt: string;
  }
>;

/**
 * Another user took over an e-mail address this user's sync had claimed and never took (its
 * append to this stream never came: CLAIM_ABANDONED_AFTER_MS in src/commands/users.ts). It
 * changes nothing of the user: it moves the stream past the revision that sync decided on, so
 * that sync, if it is only late, fails its expected revision and decides again (and finds the
 * address taken) instead of giving the address to a second user. Ids only.
 */
export type EmailClaimWithdrawn = DomainEvent<
  'EmailClaimWithdrawn',
  { readonly userId: string; readonly takenBy: string; readonly withdrawnAt: string }
>;

export type UserEvent =
  | UserErased
  | EmailClaimWithdrawn
  | UserSynced
  | UserDeactivated
  | UserReactivated
  | PasswordChanged
  | PasswordResetRequested
  | EmailVerified;
