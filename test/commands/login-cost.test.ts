import { randomUUID } from 'node:crypto';
import { createAuthCommands, type AuthCommands } from '../../src/commands/auth';
import { handleCommand, newCommandContext, systemClock } from '../../src/commands/handler';
import { createSessionCommands } from '../../src/commands/sessions';
import { createUserCommands, type UserCommands } from '../../src/commands/users';
import { createPasswordHasher, type PasswordHasher } from '../../src/auth/passwords';
import { createTokens } from '../../src/auth/tokens';
import { ForbiddenError, UnauthorizedError } from '../../src/domain/errors';
import { userStream } from '../../src/domain/events';
import { userDecider } from '../../src/domain/user';
import type { CredentialStore } from '../../src/infra/credentials/port';
import type { EventStore, RecordedEvent } from '../../src/infra/eventstore/port';
import type { ReadCollection, ReadDoc, ReadStore } from '../../src/infra/readstore/port';
import { createLogger } from '../../src/logger';
import { evolveUserDoc, USERS_COLLECTION, type UserDoc } from '../../src/projections/users';
import { createLocalWatermark } from '../../src/projections/watermark';
import { openEventStore, openReadStore, unique, type EventStoreKind, type ReadStoreKind } from '../support/adapters';
import { TEST_SECRETS } from '../support/server';

/**
 * Which e-mails have accounts must not show in the time a login takes (decisions §3): an
 * unknown e-mail and a wrong password on a known account do the same work — the same reads of
 * the read model, the event streams and the credential store, and one argon2 verification
 * each. Counted, not timed, over both modes' adapters.
 */

interface Work {
  readModel: number;
  streams: number;
  credentials: number;
  verifications: number;
}
const none = (): Work => ({ readModel: 0, streams: 0, credentials: 0, verifications: 0 });

function countingReadStore(inner: ReadStore, work: { current: Work }): ReadStore {
  return {
    collection: <T extends ReadDoc>(name: string): ReadCollection<T> => {
      const c = inner.collection<T>(name);
      return {
        getGuard: (id) => c.getGuard(id),
        writeMany: (changes) => c.writeMany(changes),
        put: (doc, guard) => c.put(doc, guard),
        remove: (id, guard) => c.remove(id, guard),
        load: (entries) => c.load(entries),
        ensureIndex: (fields, options) => c.ensureIndex(fields, options),
        clear: () => c.clear(),
        get: (id) => (work.current.readModel++, c.get(id)),
        getMany: (ids) => (work.current.readModel++, c.getMany(ids)),
        find: (query) => (work.current.readModel++, c.find(query)),
        count: (where) => (work.current.readModel++, c.count(where)),
      };
    },
    getCheckpoint: (name) => inner.getCheckpoint(name),
    setCheckpoint: (name, value) => inner.setCheckpoint(name, value),
    advanceCheckpoint: (name, value, guard) => inner.advanceCheckpoint(name, value, guard),
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
}

function countingEventStore(inner: EventStore, work: { current: Work }): EventStore {
  return new Proxy(inner, {
    get(target, property, receiver) {
      if (property === 'readStream') {
        return (...args: Parameters<EventStore['readStream']>) => {
          work.current.streams++;
          return target.readStream(...args);
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

function memoryCredentials(work: { current: Work }): CredentialStore {
  const hashes = new Map<string, string>();
  return {
    put: async (userId, version, hash) => void hashes.set(`${userId}/${version}`, hash),
    get: async (userId, version) => (work.current.credentials++, hashes.get(`${userId}/${version}`) ?? null),
    getDataKey: async () => null,
    putDataKey: async (_subject, key) => key,
    forget: async () => undefined,
    ping: async () => undefined,
    close: async () => undefined,
  };
}

function countingHasher(inner: PasswordHasher, work: { current: Work }): PasswordHasher {
  return {
    hash: (password) => inner.hash(password),
    verify: (hash, password) => (work.current.verifications++, inner.verify(hash, password)),
    verifyNothing: (password) => (work.current.verifications++, inner.verifyNothing(password)),
    stats: () => inner.stats(),
  };
}

const MODES: ReadonlyArray<[string, EventStoreKind, ReadStoreKind]> = [
  ['embedded', 'embedded', 'memory'],
  ['distributed', 'esdb', 'mongodb'],
];

describe.each(MODES)('login does the same work for an unknown e-mail as for a wrong password (%s mode)', (_mode, eventStoreKind, readStoreKind) => {
  const work = { current: none() };
  let cleanups: Array<() => Promise<void>> = [];
  let auth: AuthCommands;
  let users: UserCommands;
  let eventStore: EventStore;
  let readStore: ReadStore;
  let credentials: CredentialStore;
  let hasher: PasswordHasher;

  beforeAll(async () => {
    const es = await openEventStore(eventStoreKind);
    const rs = await openReadStore(readStoreKind);
    cleanups = [es.cleanup, rs.cleanup];
    eventStore = countingEventStore(es.value, work);
    readStore = countingReadStore(rs.value, work);
    credentials = memoryCredentials(work);
    hasher = countingHasher(createPasswordHasher(), work);
    const watermark = createLocalWatermark();
    const settle = { watermark, clock: systemClock, readYourWritesTimeoutMs: 1 };
    users = createUserCommands({ eventStore, ...settle, revokeSessions: async () => undefined });
    auth = createAuthCommands({
      eventStore,
      readStore,
      credentials,
      hasher,
      tokens: createTokens({
        jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
        jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
        jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
      }),
      sessions: createSessionCommands({ eventStore, readStore, ...settle }),
      mailer: { send: async () => undefined, close: () => undefined },
      logger: createLogger('silent'),
      ...settle,
      adminEmails: [],
      appOrigin: undefined,
    });
  }, 60_000);
  afterAll(async () => {
    for (const cleanup of cleanups) await cleanup();
  });

  /** A user as sync-customer and a password change make it, with its read-model document. */
  const account = async (options: { password: string | null; active: boolean }): Promise<string> => {
    const email = `${unique('login-cost')}@example.com`;
    const ctx = newCommandContext({ type: 'crm', id: 'key-1' }, `req-${randomUUID()}`);
    const { user } = await users.syncCustomer({ id: Math.floor(Math.random() * 1e9), first_name: 'Ada', last_name: 'L', email, active: options.active }, ctx);
    if (options.password !== null) {
      const changed = await handleCommand(eventStore, userDecider, userStream(user.userId), { type: 'ChangePassword', data: { userId: user.userId, now: new Date().toISOString() } }, ctx, systemClock);
      await credentials.put(user.userId, changed.state.exists ? changed.state.passwordVersion : 1, await hasher.hash(options.password));
    }
    let doc: UserDoc | null = null;
    const events: RecordedEvent[] = [];
    for await (const event of eventStore.readStream(userStream(user.userId))) events.push(event);
    for (const event of events) doc = evolveUserDoc(doc, event);
    if (doc === null) throw new Error('no user document');
    await readStore.collection<UserDoc>(USERS_COLLECTION).put(doc, '~');
    return email;
  };

  const measured = async (email: string, password: string): Promise<{ work: Work; refused: unknown }> => {
    work.current = none();
    let refused: unknown = null;
    try {
      await auth.login({ email, password }, { ip: '127.0.0.1', userAgent: 'jest' }, `req-${randomUUID()}`);
    } catch (error) {
      refused = error;
    }
    const done = work.current;
    work.current = none();
    return { work: done, refused };
  };

  test('unknown e-mail, wrong password, synced user without a password: the same reads and one verification each', async () => {
    const known = await account({ password: 'the-right-password', active: true });
    const synced = await account({ password: null, active: true });
    // The first unknown e-mail sets the process looking for an account to stand in (once, in the background).
    await measured(`ghost.${randomUUID()}@example.com`, 'warm-up-1');
    const unknown = await measured(`ghost.${randomUUID()}@example.com`, 'a-guess-1');
    const wrong = await measured(known, 'a-guess-1');
    const noPassword = await measured(synced, 'a-guess-1');
    for (const attempt of [unknown, wrong, noPassword]) {
      expect(attempt.refused).toBeInstanceOf(UnauthorizedError);
      expect((attempt.refused as Error).message).toBe('Invalid email or password');
    }
    expect(unknown.work).toEqual({ readModel: 1, streams: 1, credentials: 1, verifications: 1 });
    expect(wrong.work).toEqual(unknown.work);
    expect(noPassword.work).toEqual(unknown.work);
  });

  test('an inactive account: the right password gets 403, a wrong one the usual 401, with the same work', async () => {
    const email = await account({ password: 'the-right-password', active: true });
    const ctx = newCommandContext({ type: 'crm', id: 'key-1' }, `req-${randomUUID()}`);
    const [doc] = await readStore.collection<UserDoc>(USERS_COLLECTION).find({ where: { email }, limit: 1 });
    if (doc === undefined) throw new Error('no user document');
    // Deactivated through sync-customer, as the CRM does, and so in the read model.
    await users.syncCustomer({ id: doc.syncId, first_name: doc.firstName, last_name: doc.lastName, email, active: false }, ctx);
    await readStore.collection<UserDoc>(USERS_COLLECTION).put({ ...doc, isActive: false }, '~~');

    const right = await measured(email, 'the-right-password');
    expect(right.refused).toBeInstanceOf(ForbiddenError);
    expect((right.refused as Error).message).toBe('Account is inactive');
    const wrong = await measured(email, 'a-guess-1');
    expect(wrong.refused).toBeInstanceOf(UnauthorizedError);
    expect((wrong.refused as Error).message).toBe('Invalid email or password');
    expect(wrong.work).toEqual(right.work);
    expect(wrong.work).toEqual((await measured(`ghost.${randomUUID()}@example.com`, 'a-guess-1')).work);
  });
});
