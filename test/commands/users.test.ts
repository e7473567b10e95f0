import { randomBytes, randomUUID } from 'node:crypto';
import { ConflictError } from '../../src/domain/errors';
import { handleCommand, newCommandContext, systemClock } from '../../src/commands/handler';
import { createUserCommands, type SyncCustomerInput, type UserCommandDeps, type UserCommands } from '../../src/commands/users';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createLocalWatermark } from '../../src/projections/watermark';
import { userStream } from '../../src/domain/events';
import { crmCustomerStream, emailReservationStream } from '../../src/domain/reservation';
import { USER_MESSAGES, userDecider } from '../../src/domain/user';
import { keyedEmailReservationStream } from '../../src/privacy/reservation-names';
import { openEventStore, unique, type EventStoreKind } from '../support/adapters';

const ctx = () => newCommandContext({ type: 'crm', id: 'key-1' }, `req-${randomUUID()}`);
let nextSyncId = Math.floor(Math.random() * 1_000_000) * 100;

function input(overrides: Partial<SyncCustomerInput> = {}): SyncCustomerInput {
  nextSyncId++;
  return { id: nextSyncId, first_name: 'Grace', last_name: 'Hopper', email: `${unique('g')}@example.com`, active: true, ...overrides };
}

describe.each<EventStoreKind>(['embedded', 'esdb'])('sync-customer command over the %s event store', (kind) => {
  let store: EventStore;
  let cleanup: () => Promise<void>;
  let users: UserCommands;
  let deps: UserCommandDeps;

  beforeAll(async () => {
    const opened = await openEventStore(kind);
    store = opened.value;
    cleanup = opened.cleanup;
    // No projector here: the watermark never advances, so keep the wait short.
    deps = {
      eventStore: store,
      watermark: createLocalWatermark(),
      clock: systemClock,
      readYourWritesTimeoutMs: 1,
      revokeSessions: async () => undefined,
    };
    users = createUserCommands(deps);
  }, 30_000);
  afterAll(() => cleanup());

  test('two customers racing for one e-mail: exactly one gets it, the other a conflict', async () => {
    const email = `${unique('race')}@example.com`;
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => users.syncCustomer(input({ email }), ctx())));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(ok).toHaveLength(1);
    expect(failed).toHaveLength(5);
    for (const f of failed) expect(f.reason).toBeInstanceOf(ConflictError);
  });

  test('one customer synced many times at once becomes one user, created once', async () => {
    const body = input();
    const results = await Promise.all(Array.from({ length: 5 }, () => users.syncCustomer(body, ctx())));
    const ids = new Set(results.map((r) => r.user.userId));
    expect(ids.size).toBe(1);
    expect(results.filter((r) => r.created)).toHaveLength(1);
    const events = [];
    for await (const e of store.readStream(userStream([...ids][0] ?? ''))) events.push(e.type);
    expect(events.filter((t) => t === 'UserSynced')).toHaveLength(1);
  });

  test('changing the e-mail releases the old one for someone else', async () => {
    const first = input();
    await users.syncCustomer(first, ctx());
    await users.syncCustomer({ ...first, email: `${unique('moved')}@example.com` }, ctx());
    const other = await users.syncCustomer(input({ email: first.email }), ctx());
    expect(other.created).toBe(true);
    expect(other.user.email).toBe(first.email);
  });

  test('no event holds the e-mail in its stream name', async () => {
    const body = input({ email: `${unique('secret')}@example.com` });
    await users.syncCustomer(body, ctx());
    const sub = store.subscribe();
    const names: string[] = [];
    for await (const item of sub) {
      if (item.kind === 'caught-up') break;
      names.push(item.event.streamName);
    }
    await sub.close();
    expect(names.some((n) => n.includes(body.email))).toBe(false);
  });

  /** `UserErased` alone: an erasure killed before it released the person's e-mail and CRM id. */
  const eraseWithoutRelease = async (userId: string): Promise<void> => {
    const now = systemClock.now().toISOString();
    await handleCommand(store, userDecider, userStream(userId), { type: 'EraseUser', data: { userId, reason: 'crm', devices: [], now } }, ctx(), systemClock);
  };

  const owners = async (stream: string): Promise<string[]> => {
    const seen: string[] = [];
    for await (const e of store.readStream(stream)) seen.push(`${e.type} ${(e.data as { ownerId: string }).ownerId}`);
    return seen;
  };

  test('the e-mail and the CRM id an erased user still holds (never released) go to new users, the takeover recorded', async () => {
    const body = input();
    const person = (await users.syncCustomer(body, ctx())).user.userId;
    await eraseWithoutRelease(person);

    const newcomer = await users.syncCustomer(input({ email: body.email }), ctx());
    expect(newcomer.created).toBe(true);
    expect(newcomer.user.userId).not.toBe(person);
    const again = await users.syncCustomer({ ...body, email: `${unique('again')}@example.com` }, ctx());
    expect(again.created).toBe(true);
    expect([person, newcomer.user.userId]).not.toContain(again.user.userId);

    expect(await owners(emailReservationStream(body.email))).toEqual([`ReservationClaimed ${person}`, `ReservationReleased ${person}`, `ReservationClaimed ${newcomer.user.userId}`]);
    expect(await owners(crmCustomerStream(body.id))).toEqual([`ReservationClaimed ${person}`, `ReservationReleased ${person}`, `ReservationClaimed ${again.user.userId}`]);
    // The erased user's stream still ends with UserErased: nothing was appended to it.
    const types: string[] = [];
    for await (const e of store.readStream(userStream(person))) types.push(e.type);
    expect(types.at(-1)).toBe('UserErased');
  });

  test('newcomers racing for the address of an erased user: exactly one gets it, the others a conflict', async () => {
    const body = input();
    await eraseWithoutRelease((await users.syncCustomer(body, ctx())).user.userId);
    const results = await Promise.allSettled(Array.from({ length: 4 }, () => users.syncCustomer(input({ email: body.email }), ctx())));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(ConflictError);
  });

  test('an address held by a user who was not erased stays taken', async () => {
    const body = input();
    await users.syncCustomer(body, ctx());
    await expect(users.syncCustomer(input({ email: body.email }), ctx())).rejects.toThrow(USER_MESSAGES.emailTakenBySyncId);
  });

  test('an address claimed under its unkeyed name by a user since erased goes to a new user under its keyed name', async () => {
    const body = input();
    const person = (await users.syncCustomer(body, ctx())).user.userId;
    await eraseWithoutRelease(person);
    const keyed = createUserCommands({ ...deps, emailReservationStream: keyedEmailReservationStream(randomBytes(32)) });
    const newcomer = await keyed.syncCustomer(input({ email: body.email }), ctx());
    expect(newcomer.created).toBe(true);
    expect(newcomer.user.userId).not.toBe(person);
  });
});
