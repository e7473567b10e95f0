import type { SessionEvent } from '../../src/domain/session';
import { sessionStream } from '../../src/domain/events';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { ReadStore } from '../../src/infra/readstore/port';
import { SESSIONS_COLLECTION, activeFamilyIds, sessionFamily, sessionsProjection, type SessionDoc } from '../../src/projections/sessions';

const T0 = '2025-03-01T08:00:00.000Z';
const T1 = '2025-03-01T08:15:00.000Z';
const T2 = '2025-03-01T08:30:00.000Z';
const DAYS_30 = 30 * 24 * 3600 * 1000;
const plus30 = (iso: string) => new Date(Date.parse(iso) + DAYS_30).toISOString();

let position = 0n;
function recorded(event: SessionEvent): RecordedEvent {
  position += 5n;
  return {
    id: `e-${position}`,
    streamName: sessionStream(event.data.familyId),
    revision: 0n,
    position: { commit: position, prepare: position },
    type: event.type,
    data: event.data,
    metadata: { occurredAt: T0, actor: { type: 'user', id: 'u' }, requestId: 'r', causationId: 'c', correlationId: 'c' },
  };
}

const issued = (familyId: string, userId: string, jti: string, at: string): SessionEvent => ({
  type: 'RefreshIssued',
  data: { familyId, jti, userId, issuedAt: at, expiresAt: plus30(at), ip: '127.0.0.1', userAgent: 'jest' },
});
const rotated = (familyId: string, jti: string, replacedBy: string, at: string): SessionEvent => ({
  type: 'RefreshRotated',
  data: { familyId, jti, replacedBy, rotatedAt: at },
});
const revoked = (familyId: string, userId: string, reason: 'logout' | 'reuse', at: string): SessionEvent => ({
  type: 'RefreshRevoked',
  data: { familyId, userId, reason, revokedAt: at },
});

async function applyAll(store: ReadStore, events: readonly RecordedEvent[]): Promise<void> {
  for (const event of events) await sessionsProjection.applyBatch([event], store);
}

describe('sessions projection', () => {
  let store: ReadStore;
  beforeEach(async () => {
    store = createMemoryReadStore();
    await sessionsProjection.init(store);
  });

  test('given a login and two rotations, then one active family naming its newest token', async () => {
    await applyAll(store, [
      recorded(issued('f1', 'u1', 'j1', T0)),
      recorded(rotated('f1', 'j1', 'j2', T1)),
      recorded(issued('f1', 'u1', 'j2', T1)),
      recorded(rotated('f1', 'j2', 'j3', T2)),
      recorded(issued('f1', 'u1', 'j3', T2)),
    ]);
    expect(await sessionFamily(store, 'f1')).toEqual<SessionDoc>({
      id: 'f1',
      userId: 'u1',
      status: 'active',
      revokedReason: null,
      currentJti: 'j3',
      createdAt: T0,
      lastIssuedAt: T2,
      expiresAt: plus30(T2),
      revokedAt: null,
    });
  });

  test('given revocations, then only the families still active are listed for the user', async () => {
    await applyAll(store, [
      recorded(issued('f1', 'u1', 'j1', T0)),
      recorded(issued('f2', 'u1', 'j2', T0)),
      recorded(issued('f3', 'u2', 'j3', T0)),
      recorded(revoked('f1', 'u1', 'logout', T1)),
      // A second revocation (reuse after logout) keeps the first reason.
      recorded(revoked('f1', 'u1', 'reuse', T2)),
    ]);
    expect(await activeFamilyIds(store, 'u1')).toEqual(['f2']);
    expect(await activeFamilyIds(store, 'u2')).toEqual(['f3']);
    expect(await sessionFamily(store, 'f1')).toMatchObject({ status: 'revoked', revokedReason: 'logout', revokedAt: T1 });
  });

  test('the same events applied twice give the same documents', async () => {
    const events = [recorded(issued('f1', 'u1', 'j1', T0)), recorded(rotated('f1', 'j1', 'j2', T1)), recorded(issued('f1', 'u1', 'j2', T1))];
    await applyAll(store, events);
    const once = await store.collection<SessionDoc>(SESSIONS_COLLECTION).find();
    await applyAll(store, events);
    await applyAll(store, [events[0] as RecordedEvent]);
    expect(await store.collection<SessionDoc>(SESSIONS_COLLECTION).find()).toEqual(once);
  });

  test('ignores events of other streams', async () => {
    await sessionsProjection.applyBatch([{ ...recorded(issued('f9', 'u9', 'j9', T0)), streamName: 'user-u9' }], store);
    expect(await store.collection<SessionDoc>(SESSIONS_COLLECTION).count()).toBe(0);
  });
});
