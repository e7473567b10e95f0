import { randomUUID } from 'node:crypto';
import { UnauthorizedError } from '../../src/domain/errors';
import { sessionStream } from '../../src/domain/events';
import { newCommandContext, type Clock } from '../../src/commands/handler';
import { createSessionCommands, type SessionCommands } from '../../src/commands/sessions';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { createLocalWatermark } from '../../src/projections/watermark';
import { openEventStore, type EventStoreKind } from '../support/adapters';

const client = { ip: '127.0.0.1', userAgent: 'jest' };
const ctx = () => newCommandContext({ type: 'user', id: 'u' }, `req-${randomUUID()}`);

/** A clock that stands still until moved: a rotation's age, exactly, without waiting for it. */
function manualClock(): Clock & { advance(ms: number): void } {
  let at = Date.now();
  return { now: () => new Date(at), advance: (ms) => void (at += ms) };
}

describe.each<EventStoreKind>(['embedded', 'esdb'])('refresh-token families over the %s event store', (kind) => {
  let store: EventStore;
  let cleanup: () => Promise<void>;
  let sessions: SessionCommands;
  let clock: ReturnType<typeof manualClock>;

  const types = async (familyId: string): Promise<string[]> => {
    const found: string[] = [];
    for await (const event of store.readStream(sessionStream(familyId))) found.push(event.type);
    return found;
  };
  /** Another API process on the same event store: it shares nothing with this one but the log (and the clock). */
  const anotherProcess = (): SessionCommands =>
    createSessionCommands({ eventStore: store, readStore: createMemoryReadStore(), watermark: createLocalWatermark(), clock, readYourWritesTimeoutMs: 1 });

  beforeAll(async () => {
    const opened = await openEventStore(kind);
    store = opened.value;
    cleanup = opened.cleanup;
    clock = manualClock();
    // No projector: the watermark never advances, so keep the wait short.
    sessions = anotherProcess();
  }, 30_000);
  afterAll(() => cleanup());

  test('rotation issues a new token in the same family', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const issued = await sessions.rotate({ familyId, jti }, client, ctx());
    expect(issued).toMatchObject({ familyId, userId: 'u1', ip: '127.0.0.1', userAgent: 'jest' });
    expect(issued.jti).not.toBe(jti);
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued']);
  });

  test('many rotations of one token at once: one wins, the others are refused without revoking', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => sessions.rotate({ familyId, jti }, client, ctx())));
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(won).toHaveLength(1);
    for (const r of lost) {
      expect(r.reason).toBeInstanceOf(UnauthorizedError);
      expect((r.reason as Error).message).toBe('Refresh token has been revoked');
    }
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued']);
  });

  test('a rotated token presented again within 5 s of its rotation, on this process or another, lost a race: refused, the family kept', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const winner = await sessions.rotate({ familyId, jti }, client, ctx());
    await expect(sessions.rotate({ familyId, jti }, client, ctx())).rejects.toThrow('Refresh token has been revoked');
    clock.advance(4_999);
    await expect(anotherProcess().rotate({ familyId, jti }, client, ctx())).rejects.toThrow('Refresh token has been revoked');
    expect(await types(familyId)).not.toContain('RefreshReuseDetected');
    // The winner's token goes on.
    await sessions.rotate({ familyId, jti: winner.jti }, client, ctx());
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued', 'RefreshRotated', 'RefreshIssued']);
  });

  test('a rotated token presented more than 5 s after its rotation is reuse: the family is revoked, on any process', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const second = await sessions.rotate({ familyId, jti }, client, ctx());
    clock.advance(5_001);
    await expect(anotherProcess().rotate({ familyId, jti }, client, ctx())).rejects.toThrow('Refresh token has been revoked');
    await expect(sessions.rotate({ familyId, jti: second.jti }, client, ctx())).rejects.toThrow('Refresh token has been revoked');
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued', 'RefreshReuseDetected', 'RefreshRevoked']);
  });

  test('the window is configurable (0: every second presentation is reuse)', async () => {
    const strict = createSessionCommands({
      eventStore: store,
      readStore: createMemoryReadStore(),
      watermark: createLocalWatermark(),
      clock,
      readYourWritesTimeoutMs: 1,
      refreshRaceWindowMs: 0,
    });
    const { familyId, jti } = await strict.open('u1', client, ctx());
    await strict.rotate({ familyId, jti }, client, ctx());
    await expect(strict.rotate({ familyId, jti }, client, ctx())).rejects.toThrow('Refresh token has been revoked');
    expect(await types(familyId)).toContain('RefreshReuseDetected');
  });

  test('revoking is idempotent; an unknown family or token is an invalid refresh token', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    await sessions.revokeFamily(familyId, 'logout', ctx());
    await sessions.revokeFamily(familyId, 'logout', ctx());
    await sessions.revokeFamily(randomUUID(), 'logout', ctx());
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRevoked']);
    await expect(sessions.rotate({ familyId, jti }, client, ctx())).rejects.toThrow('Refresh token has been revoked');
    await expect(sessions.rotate({ familyId: randomUUID(), jti }, client, ctx())).rejects.toThrow('Invalid refresh token');
  });
});
