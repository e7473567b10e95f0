import { asHomeHubEvent, parseStreamName } from '../domain/events';
import type { RevokeReason } from '../domain/session';
import type { RecordedEvent } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { documentProjection } from './projection';

export const SESSIONS_COLLECTION = 'sessions';

/**
 * One refresh-token family (one login) per document, so "every family of a user" is one
 * indexed query (logout without `fam`, password reset, deactivation). The statuses of the
 * tokens stay in the session stream, which rotation decides on.
 */
export interface SessionDoc {
  readonly id: string;
  readonly userId: string;
  readonly status: 'active' | 'revoked';
  readonly revokedReason: RevokeReason | null;
  /**
   * The jti of the family's newest token. A refresh answers only once this shows its
   * rotation (read-your-writes), so while it still names a presented token that the stream
   * says is rotated, the rotating request has not answered yet: the two are concurrent.
   */
  readonly currentJti: string;
  readonly createdAt: string;
  /** When the newest token of the family was issued. */
  readonly lastIssuedAt: string;
  /** When the newest token of the family expires: the family is dead after that. */
  readonly expiresAt: string;
  readonly revokedAt: string | null;
}

export function evolveSessionDoc(doc: SessionDoc | null, recorded: RecordedEvent): SessionDoc | null {
  const event = asHomeHubEvent(recorded);
  if (event === null) return doc;
  switch (event.type) {
    case 'RefreshIssued': {
      const e = event.data;
      if (doc === null) {
        return {
          id: e.familyId,
          userId: e.userId,
          status: 'active',
          revokedReason: null,
          currentJti: e.jti,
          createdAt: e.issuedAt,
          lastIssuedAt: e.issuedAt,
          expiresAt: e.expiresAt,
          revokedAt: null,
        };
      }
      return { ...doc, currentJti: e.jti, lastIssuedAt: e.issuedAt, expiresAt: e.expiresAt };
    }
    case 'RefreshRevoked':
      if (doc === null || doc.status === 'revoked') return doc;
      return { ...doc, status: 'revoked', revokedReason: event.data.reason, revokedAt: event.data.revokedAt };
    default:
      return doc;
  }
}

export const sessionsProjection = documentProjection<SessionDoc>({
  name: 'sessions',
  collection: SESSIONS_COLLECTION,
  streamPrefixes: ['session-'],
  ids: (event) => {
    const stream = parseStreamName(event.streamName);
    return stream?.category === 'session' ? [stream.id] : [];
  },
  evolve: (doc, event) => evolveSessionDoc(doc, event),
  indexes: [
    {
      fields: [
        { field: 'userId', order: 'asc' },
        { field: 'status', order: 'asc' },
      ],
    },
  ],
});

/** Ids of the user's families not yet revoked (expired ones included: revoking them is harmless). */
export async function activeFamilyIds(store: ReadStore, userId: string): Promise<string[]> {
  const docs = await store.collection<SessionDoc>(SESSIONS_COLLECTION).find({ where: { userId, status: 'active' } });
  return docs.map((doc) => doc.id);
}

export async function sessionFamily(store: ReadStore, familyId: string): Promise<SessionDoc | null> {
  return store.collection<SessionDoc>(SESSIONS_COLLECTION).get(familyId);
}
