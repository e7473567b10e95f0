import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAccessRevocationFeed } from '../../src/auth/access-revocations';
import { createPasswordHasher } from '../../src/auth/passwords';
import { createTokens } from '../../src/auth/tokens';
import { createAuthCommands, type AuthCommands } from '../../src/commands/auth';
import { newCommandContext, type Clock } from '../../src/commands/handler';
import { createSessionCommands, type SessionCommands } from '../../src/commands/sessions';
import { createUserCommands, type UserCommands } from '../../src/commands/users';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import type { OutgoingMail } from '../../src/infra/mail/mailer';
import { createMemoryReadStore, type MemoryReadStore } from '../../src/infra/readstore/memory';
import { createLogger } from '../../src/logger';
import { startProjector } from '../../src/projections/projector';
import { usersProjection } from '../../src/projections/users';
import type { Watermark } from '../../src/projections/watermark';
import { resetTokenIn } from '../support/accounts';
import { TEST_SECRETS } from '../support/server';

/**
 * Issue 25, point 10: a revocation never depends on a read model that may lag. Here the
 * projector is as late as it gets: the sessions read model never sees a family, and every
 * read-your-writes wait gives up. A family opened just before a deactivation, or a password
 * reset, still cannot survive it: its refresh token is refused once the user is active again,
 * and its access tokens of the cut's very second are refused by a process that follows the log.
 */

const logger = createLogger('silent');
const tokens = createTokens({
  jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
  jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
  jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
});

/** Read-your-writes that never comes: the projector is behind for as long as anyone waits. */
const neverCaughtUp: Watermark = {
  advance: () => undefined,
  waitFor: () => Promise.resolve(false),
  current: () => null,
  close: () => Promise.resolve(),
};

interface Rig {
  readonly store: EventStore;
  readonly readStore: MemoryReadStore;
  readonly sessions: SessionCommands;
  readonly users: UserCommands;
  readonly auth: AuthCommands;
  readonly mails: OutgoingMail[];
  /** Every event in one instant: a token's `iat` is the very second of every cut. */
  readonly clock: Clock;
  /** Projects the users read model only (never the sessions), up to now. */
  projectUsers(): Promise<void>;
  stop(): Promise<void>;
}

async function rig(): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-lagging-'));
  const store = await openEmbeddedEventStore(dir);
  const readStore = createMemoryReadStore();
  const credentials = await openFileCredentialStore(dir);
  const instant = new Date();
  const clock: Clock = { now: () => instant };
  const settle = { watermark: neverCaughtUp, clock, readYourWritesTimeoutMs: 50 };
  const sessions = createSessionCommands({ eventStore: store, readStore, ...settle });
  const users = createUserCommands({ eventStore: store, ...settle, revokeSessions: (userId, reason, ctx) => sessions.revokeAllForUser(userId, reason, ctx) });
  const mails: OutgoingMail[] = [];
  const auth = createAuthCommands({
    eventStore: store,
    readStore,
    credentials,
    hasher: createPasswordHasher(),
    tokens,
    sessions,
    mailer: { send: async (mail) => void mails.push(mail), close: () => undefined },
    logger,
    ...settle,
    adminEmails: [],
    appOrigin: undefined,
  });
  return {
    store,
    readStore,
    sessions,
    users,
    auth,
    mails,
    clock,
    async projectUsers() {
      const projector = await startProjector(store, readStore, [usersProjection]);
      await projector.caughtUp;
      await projector.stop();
    },
    stop: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

let nextSyncId = 900_000 + Math.floor(Math.random() * 50_000);

async function syncedUser(r: Rig, active: boolean, known?: { syncId: number; email: string }): Promise<{ userId: string; syncId: number; email: string }> {
  const syncId = known?.syncId ?? nextSyncId++;
  const email = known?.email ?? `lagging.${syncId}@example.com`;
  const { user } = await r.users.syncCustomer(
    { id: syncId, first_name: 'Ada', last_name: 'Lovelace', email, active },
    newCommandContext({ type: 'crm', id: 'crm' }, randomUUID()),
  );
  return { userId: user.userId, syncId, email };
}

/** A login's family, opened straight through the session commands (the sessions read model never sees it). */
async function openFamily(r: Rig, userId: string): Promise<{ familyId: string; refreshToken: string }> {
  const { familyId, jti } = await r.sessions.open(userId, { ip: null, userAgent: null }, newCommandContext({ type: 'user', id: userId }, randomUUID()));
  return { familyId, refreshToken: tokens.signRefresh({ sub: userId, fam: familyId, jti }).token };
}

/** What a process that starts now, from the log, says of an access token of `familyId` issued in the cut's second. */
async function accessRevoked(r: Rig, userId: string, familyId: string): Promise<boolean> {
  const feed = await startAccessRevocationFeed({ eventStore: r.store, readStore: createMemoryReadStore(), logger });
  try {
    return feed.revocations.isRevoked({ sub: userId, iat: Math.floor(r.clock.now().getTime() / 1000), fam: familyId });
  } finally {
    await feed.stop();
  }
}

async function refreshOutcome(r: Rig, refreshToken: string): Promise<string> {
  try {
    await r.auth.refresh(refreshToken, { ip: null, userAgent: null }, randomUUID());
    return 'refreshed';
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

describe('revocations with the projector delayed', () => {
  jest.setTimeout(60_000);
  let r: Rig;
  beforeEach(async () => {
    r = await rig();
  });
  afterEach(async () => {
    await r.stop();
  });

  it('a family opened just before a deactivation does not survive it, even after a reactivation', async () => {
    const user = await syncedUser(r, true);
    const family = await openFamily(r, user.userId);
    await syncedUser(r, false, user);
    await syncedUser(r, true, user);
    await r.projectUsers();
    expect((await r.readStore.collection<{ id: string; isActive: boolean }>('users').get(user.userId))?.isActive).toBe(true);

    expect(await refreshOutcome(r, family.refreshToken)).toBe('Refresh token has been revoked');
    expect(await accessRevoked(r, user.userId, family.familyId)).toBe(true);
    // A family opened after the reactivation lives.
    const fresh = await openFamily(r, user.userId);
    expect(await accessRevoked(r, user.userId, fresh.familyId)).toBe(false);
    expect(await refreshOutcome(r, fresh.refreshToken)).toBe('refreshed');
  });

  it('a family opened just before a password reset does not survive it', async () => {
    const user = await syncedUser(r, true);
    await r.projectUsers();
    const family = await openFamily(r, user.userId);
    r.auth.requestPasswordReset(user.email, randomUUID());
    await r.auth.drain();
    const mail = r.mails.find((m) => m.to === user.email);
    if (mail === undefined) throw new Error('no reset mail');
    await r.auth.confirmPasswordReset({ token: resetTokenIn(mail.text), password: 'a-new-Secret-42' }, randomUUID());
    await r.projectUsers();

    expect(await refreshOutcome(r, family.refreshToken)).toBe('Refresh token has been revoked');
    expect(await accessRevoked(r, user.userId, family.familyId)).toBe(true);
  });
});
