import { randomUUID } from 'node:crypto';
import { UnauthorizedError } from '../../src/domain/errors';
import { sessionStream } from '../../src/domain/events';
import { newCommandContext, systemClock } from '../../src/commands/handler';
import { createSessionCommands, type SessionCommands } from '../../src/commands/sessions';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { createLocalWatermark } from '../../src/projections/watermark';
import { openEventStore, type EventStoreKind } from '../support/adapters';

const client = { ip: '127.0.0.1', userAgent: 'jest' };
const ctx = () => newCommandContext({ type: 'user', id: 'u' }, `req-${randomUUID()}`);
const now = () => new Date().toISOString();

describe.each<EventStoreKind>(['embedded', 'esdb'])('refresh-token families over the %s event store', (kind) => {
  let store: EventStore;
  let cleanup: () => Promise<void>;
  let sessions: SessionCommands;

  const types = async (familyId: string): Promise<string[]> => {
    const found: string[] = [];
    for await (const event of store.readStream(sessionStream(familyId))) found.push(event.type);
    return found;
  };

  beforeAll(async () => {
    const opened = await openEventStore(kind);
    store = opened.value;
    cleanup = opened.cleanup;
    // No projector: the watermark never advances, so keep the wait short.
    sessions = createSessionCommands({
      eventStore: store,
      readStore: createMemoryReadStore(),
      watermark: createLocalWatermark(),
      clock: systemClock,
      readYourWritesTimeoutMs: 1,
    });
  }, 30_000);
  afterAll(() => cleanup());

  test('rotation issues a new token in the same family', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const issued = await sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx());
    expect(issued).toMatchObject({ familyId, userId: 'u1', ip: '127.0.0.1', userAgent: 'jest' });
    expect(issued.jti).not.toBe(jti);
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued']);
  });

  test('many rotations of one token at once: one wins, the others are refused without revoking', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const results = await Promise.allSettled(
      Array.from({ length: 5 }, () => sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx())),
    );
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(won).toHaveLength(1);
    for (const r of lost) {
      expect(r.reason).toBeInstanceOf(UnauthorizedError);
      expect((r.reason as Error).message).toBe('Refresh token has been revoked');
    }
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued']);
  });

  test('a rotated token that was still the newest when its request arrived is refused without revoking', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const winner = await sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx());
    await expect(sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    // The winner's token goes on.
    await sessions.rotate({ familyId, jti: winner.jti, requestedAt: now(), wasCurrent: true }, client, ctx());
    expect(await types(familyId)).not.toContain('RefreshReuseDetected');
  });

  test('on another process, a request that arrived before the winner rotated is a lost race, even if handled once the read model shows the rotation', async () => {
    // Another API process on the same event store: it knows nothing of this process's rotations.
    const other = createSessionCommands({
      eventStore: store,
      readStore: createMemoryReadStore(),
      watermark: createLocalWatermark(),
      clock: systemClock,
      readYourWritesTimeoutMs: 1,
    });
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const arrivedEarlier = new Date(Date.now() - 50).toISOString();
    const winner = await sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx());
    // A busy process got to it late: the read model already named the winner's token.
    await expect(other.rotate({ familyId, jti, requestedAt: arrivedEarlier, wasCurrent: false }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    await sessions.rotate({ familyId, jti: winner.jti, requestedAt: now(), wasCurrent: true }, client, ctx());
    expect(await types(familyId)).not.toContain('RefreshReuseDetected');
  });

  test('a request that arrived while the winner waited for its read model is a lost race; one after the answer is reuse', async () => {
    // The winner's wait for the read model, observed: a request arriving then overlaps it.
    let duringWait = '';
    const base = createLocalWatermark();
    const observed = createSessionCommands({
      eventStore: store,
      readStore: createMemoryReadStore(),
      watermark: {
        ...base,
        waitFor: async () => {
          await new Promise((resolve) => setTimeout(resolve, 5));
          duringWait = now();
          await new Promise((resolve) => setTimeout(resolve, 5));
          return true;
        },
      },
      clock: systemClock,
      readYourWritesTimeoutMs: 1,
    });
    const { familyId, jti } = await observed.open('u1', client, ctx());
    const winner = await observed.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx());
    // Arrived after the winner decided, handled once the read model showed the rotation: still a race.
    await expect(observed.rotate({ familyId, jti, requestedAt: duringWait, wasCurrent: false }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    expect(await types(familyId)).not.toContain('RefreshReuseDetected');
    // Arrived after the winner's answer: reuse.
    await new Promise((resolve) => setTimeout(resolve, 2));
    await expect(observed.rotate({ familyId, jti, requestedAt: now(), wasCurrent: false }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    await expect(observed.rotate({ familyId, jti: winner.jti, requestedAt: now(), wasCurrent: true }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    expect(await types(familyId)).toContain('RefreshReuseDetected');
  });

  test('a rotated token presented once its successor was known is reuse: the family is revoked', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    const second = await sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx());
    await expect(sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: false }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    await expect(sessions.rotate({ familyId, jti: second.jti, requestedAt: now(), wasCurrent: true }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued', 'RefreshReuseDetected', 'RefreshRevoked']);
  });

  test('revoking is idempotent; an unknown family or token is an invalid refresh token', async () => {
    const { familyId, jti } = await sessions.open('u1', client, ctx());
    await sessions.revokeFamily(familyId, 'logout', ctx());
    await sessions.revokeFamily(familyId, 'logout', ctx());
    await sessions.revokeFamily(randomUUID(), 'logout', ctx());
    expect(await types(familyId)).toEqual(['RefreshIssued', 'RefreshRevoked']);
    await expect(sessions.rotate({ familyId, jti, requestedAt: now(), wasCurrent: true }, client, ctx())).rejects.toThrow(
      'Refresh token has been revoked',
    );
    await expect(sessions.rotate({ familyId: randomUUID(), jti, requestedAt: now(), wasCurrent: false }, client, ctx())).rejects.toThrow(
      'Invalid refresh token',
    );
  });
});
