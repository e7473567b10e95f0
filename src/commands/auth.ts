import { createHash, randomBytes } from 'node:crypto';
import { BadRequestError, ForbiddenError, UnauthorizedError } from '../domain/errors';
import { userStream } from '../domain/events';
import type { Actor } from '../domain/messages';
import { USER_MESSAGES, roleForEmail, userDecider, type ExistingUser, type UserRole } from '../domain/user';
import { ACCESS_TOKEN_TTL_SECONDS, TOKEN_MESSAGES, type AccessClaims, type Tokens } from '../auth/tokens';
import type { PasswordHasher } from '../auth/passwords';
import type { CredentialStore } from '../infra/credentials/port';
import type { EventStore, GlobalPosition } from '../infra/eventstore/port';
import type { Mailer } from '../infra/mail/mailer';
import type { ReadStore } from '../infra/readstore/port';
import type { Logger } from '../logger';
import type { LoginOutcome } from '../metrics';
import { USERS_COLLECTION, type UserDoc } from '../projections/users';
import type { Watermark } from '../projections/watermark';
import { familyCut } from '../auth/session-cutoff';
import { handleCommand, loadAggregate, newCommandContext, type Clock } from './handler';
import { latestPosition, type ClientInfo, type SessionCommands } from './sessions';

/**
 * Login, refresh, logout and password reset (decisions §3). Password hashes live in the
 * credential store under the version a `PasswordChanged` event announced; refresh tokens
 * and reset tokens exist only in responses and mails, their ids and hashes in events.
 */
export const AUTH_MESSAGES = {
  invalidCredentials: 'Invalid email or password',
  inactive: USER_MESSAGES.inactive,
  loggedOut: 'Logged out successfully',
  resetRequested: 'If the address belongs to an account, a password reset e-mail has been sent',
  resetDone: 'Password has been reset successfully',
  invalidResetToken: USER_MESSAGES.invalidResetToken,
} as const;

export interface AuthCommandDeps {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly credentials: CredentialStore;
  readonly hasher: PasswordHasher;
  readonly tokens: Tokens;
  readonly sessions: SessionCommands;
  readonly mailer: Mailer;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly watermark: Watermark;
  readonly readYourWritesTimeoutMs: number;
  readonly adminEmails: readonly string[];
  /** The front end, for the link in the reset mail. */
  readonly appOrigin: string | undefined;
  /** Told of every login answered: succeeded, or failed (wrong credentials, inactive account). */
  readonly onLogin?: (outcome: LoginOutcome) => void;
  /** Resolves once every API process refuses the access tokens a revocation at `position` ended (503 after a timeout). */
  readonly revocationsApplied?: (position: GlobalPosition) => Promise<void>;
}

export interface TokenPair {
  readonly accessToken: string;
  readonly refreshToken: string;
  readonly expiresIn: number;
}

export interface LoginResult extends TokenPair {
  readonly user: {
    readonly id: string;
    readonly email: string;
    readonly firstName: string;
    readonly lastName: string;
    readonly role: UserRole;
  };
}

export interface AuthCommands {
  login(input: { readonly email: string; readonly password: string }, client: ClientInfo, requestId: string): Promise<LoginResult>;
  refresh(refreshToken: string, client: ClientInfo, requestId: string): Promise<TokenPair>;
  logout(caller: AccessClaims, requestId: string): Promise<void>;
  /** Returns at once: the lookup, the event and the mail happen in the background. */
  requestPasswordReset(email: string, requestId: string): void;
  confirmPasswordReset(input: { readonly token: string; readonly password: string }, requestId: string): Promise<void>;
  /** Resolves when the background work started so far has finished. */
  drain(): Promise<void>;
}

/** The stand-in read when a login names no user: a user id no account ever has (ids are random v4 uuids). */
const NO_USER_ID = '00000000-0000-0000-0000-000000000000';

/** A reset token is `<userId>.<32 random bytes, base64url>`: the id finds the user's stream. */
const RESET_TOKEN = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.[A-Za-z0-9_-]{43}$/;

export function hashResetToken(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

function newResetToken(userId: string): string {
  return `${userId}.${randomBytes(32).toString('base64url')}`;
}

const userActor = (userId: string): Actor => ({ type: 'user', id: userId });
/** A reset request is made by whoever knows an address: no user is its author. */
const RESET_REQUEST_ACTOR: Actor = { type: 'system', id: 'password-reset-request' };

export function createAuthCommands(deps: AuthCommandDeps): AuthCommands {
  const { eventStore, readStore, credentials, hasher, tokens, sessions, clock, logger } = deps;
  const users = () => readStore.collection<UserDoc>(USERS_COLLECTION);
  const background = new Set<Promise<void>>();

  const settle = async (positions: ReadonlyArray<GlobalPosition | null>): Promise<void> => {
    const last = latestPosition(positions);
    if (last !== null) await deps.watermark.waitFor(last, deps.readYourWritesTimeoutMs);
  };

  const loadUser = async (userId: string) => loadAggregate(eventStore, userDecider.evolve, userDecider.initialState, userStream(userId));

  const findUserIdByEmail = async (email: string): Promise<string | null> => {
    const [doc] = await users().find({ where: { email }, limit: 1 });
    return doc?.id ?? null;
  };

  /**
   * A real account that stands in for an unknown e-mail: its stream and its credential are read
   * instead, so those reads cost what a known account's do (a missing stream or key answers
   * faster). Looked up once, in the background; until then a key no account has stands in.
   */
  let decoy: string | null = null;
  let lookingForDecoy = false;
  const decoyUserId = (): string => {
    if (decoy === null && !lookingForDecoy) {
      lookingForDecoy = true;
      users()
        .find({ limit: 1 })
        .then(
          ([doc]) => {
            decoy = doc?.id ?? null;
          },
          () => undefined,
        )
        .finally(() => {
          lookingForDecoy = false;
        });
    }
    return decoy ?? NO_USER_ID;
  };

  /**
   * Whether the password is the user's. The same work whatever the case — no such user, no
   * password of its own yet (a synced user), or a wrong one: one read of the credential store
   * (the stand-in's when the e-mail is unknown) and one verification.
   */
  const passwordMatches = async (read: ExistingUser | null, user: ExistingUser | null, password: string): Promise<boolean> => {
    const stored = read !== null && read.passwordVersion > 0;
    const hash = await credentials.get(stored ? read.userId : NO_USER_ID, stored ? read.passwordVersion : 1);
    if (user === null || user.passwordVersion === 0 || hash === null) {
      await hasher.verifyNothing(password);
      return false;
    }
    return hasher.verify(hash, password);
  };

  const issueTokens = (user: { userId: string; email: string }, familyId: string, jti: string): TokenPair => ({
    accessToken: tokens.signAccess({ sub: user.userId, email: user.email, role: roleForEmail(user.email, deps.adminEmails), fam: familyId }),
    refreshToken: tokens.signRefresh({ sub: user.userId, fam: familyId, jti }).token,
    expiresIn: ACCESS_TOKEN_TTL_SECONDS,
  });

  const sendResetMail = async (email: string, requestId: string): Promise<void> => {
    const userId = await findUserIdByEmail(email);
    if (userId === null) return;
    const token = newResetToken(userId);
    const ctx = newCommandContext(RESET_REQUEST_ACTOR, requestId);
    const result = await handleCommand(
      eventStore,
      userDecider,
      userStream(userId),
      { type: 'RequestPasswordReset', data: { userId, resetTokenHash: hashResetToken(token), now: clock.now().toISOString() } },
      ctx,
      clock,
    );
    // No event: the account is inactive, and gets no mail.
    if (result.events.length === 0 || !result.state.exists) return;
    await settle([result.position]);
    const link = deps.appOrigin === undefined ? '' : `\nOr open this link:\n${new URL(deps.appOrigin).origin}/reset-password?token=${token}\n`;
    const body = (greeting: string): string =>
      `${greeting},\n\n` +
      'someone asked to reset the password of your Home Hub account. Your reset token ' +
      '(valid for one hour, usable once):\n\n' +
      `${token}\n` +
      link +
      '\nIf you did not ask for this, ignore this e-mail: your password stays as it is.\n';
    await deps.mailer.send({
      to: result.state.email,
      subject: 'Reset your Home Hub password',
      text: body(`Hello ${result.state.firstName}`),
      forLog: { to: `user ${userId}`, text: body('Hello') },
    });
    logger.info({ userId, requestId }, 'password reset e-mail sent');
  };

  const login = async ({ email, password }: { readonly email: string; readonly password: string }, client: ClientInfo, requestId: string): Promise<LoginResult> => {
    // An unknown e-mail does the reads a known one does (a stream, a credential, one hash),
    // so the time a login takes does not tell which addresses have accounts (decisions §3).
    const userId = await findUserIdByEmail(email);
    const loaded = await loadUser(userId ?? decoyUserId());
    const read = loaded.state.exists ? loaded.state : null;
    const user = userId !== null ? read : null;
    const matches = await passwordMatches(read, user, password);
    if (user === null || !matches) throw new UnauthorizedError(AUTH_MESSAGES.invalidCredentials);
    // Only the right password learns that the account is inactive.
    if (!user.isActive) throw new ForbiddenError(AUTH_MESSAGES.inactive);

    const { familyId, jti } = await sessions.open(user.userId, client, newCommandContext(userActor(user.userId), requestId));
    return {
      ...issueTokens(user, familyId, jti),
      user: {
        id: user.userId,
        email: user.email,
        firstName: user.firstName,
        lastName: user.lastName,
        role: roleForEmail(user.email, deps.adminEmails),
      },
    };
  };

  return {
    async login(input, client, requestId) {
      try {
        const result = await login(input, client, requestId);
        deps.onLogin?.('succeeded');
        return result;
      } catch (error) {
        if (error instanceof UnauthorizedError || error instanceof ForbiddenError) deps.onLogin?.('failed');
        throw error;
      }
    },

    async refresh(refreshToken, client, requestId) {
      const claims = tokens.verifyRefresh(refreshToken);
      const ctx = newCommandContext(userActor(claims.sub), requestId);
      const user = await users().get(claims.sub);
      // Deactivation revokes the families it finds; this also closes the race with a login
      // that opened one meanwhile.
      if (user === null || !user.isActive) {
        await sessions.revokeFamily(claims.fam, 'deactivated', ctx);
        throw new UnauthorizedError(TOKEN_MESSAGES.revokedRefresh);
      }
      // A deactivation or reset after the family was opened ends it, whatever the read models list (decisions §3).
      const cut = await familyCut(eventStore, claims.sub, claims.fam);
      if (cut !== null) {
        await sessions.revokeFamily(claims.fam, cut, ctx);
        throw new UnauthorizedError(TOKEN_MESSAGES.revokedRefresh);
      }
      const issued = await sessions.rotate({ familyId: claims.fam, jti: claims.jti }, client, ctx);
      return issueTokens({ userId: user.id, email: user.email }, claims.fam, issued.jti);
    },

    async logout(caller, requestId) {
      const ctx = newCommandContext(userActor(caller.sub), requestId);
      if (caller.fam !== undefined) await sessions.revokeFamily(caller.fam, 'logout', ctx);
      else await sessions.revokeAllForUser(caller.sub, 'logout', ctx);
    },

    requestPasswordReset(email, requestId) {
      const job = sendResetMail(email, requestId).catch((error: unknown) => {
        logger.error({ requestId, err: error instanceof Error ? error.message : String(error) }, 'password reset request failed');
      });
      background.add(job);
      void job.finally(() => background.delete(job));
    },

    async confirmPasswordReset({ token, password }, requestId) {
      const match = RESET_TOKEN.exec(token);
      if (match === null || match[1] === undefined) throw new BadRequestError(AUTH_MESSAGES.invalidResetToken);
      const userId = match[1];
      const resetTokenHash = hashResetToken(token);
      const command = { type: 'ConfirmPasswordReset' as const, data: { userId, resetTokenHash, now: clock.now().toISOString() } };

      // Refuse a bad token before spending a hash on it (throws the 400).
      const { state } = await loadUser(userId);
      userDecider.decide(command, state);
      const hash = await hasher.hash(password);

      const ctx = newCommandContext(userActor(userId), requestId);
      const result = await handleCommand(eventStore, userDecider, userStream(userId), command, ctx, clock);
      const changed = result.events.find((event) => event.type === 'PasswordChanged');
      if (changed === undefined || changed.type !== 'PasswordChanged') throw new BadRequestError(AUTH_MESSAGES.invalidResetToken);
      // Stored only once the version is ours: two writers can never share one.
      await credentials.put(userId, changed.data.passwordVersion, hash);
      await sessions.revokeAllForUser(userId, 'password-reset', ctx);
      await settle([result.position]);
      // Every access token issued before the reset ends at once, on every process (decisions §3).
      if (result.position !== null) await deps.revocationsApplied?.(result.position);
    },

    async drain() {
      while (background.size > 0) await Promise.allSettled([...background]);
    },
  };
}
