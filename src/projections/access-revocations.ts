import { asHomeHubEvent, parseStreamName } from '../domain/events';
import type { RecordedEvent } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { documentProjection } from './projection';

export const ACCESS_REVOCATIONS_COLLECTION = 'access-revocations';

/** An access token lives 15 minutes (src/auth/tokens.ts); a minute more for clocks that disagree. */
export const ACCESS_TOKEN_LIFETIME_MS = 900_000;
const FORGET_MARGIN_MS = 60_000;
/** `relevantUntil` of an inactive account: every token stays refused. */
export const WHILE_INACTIVE = '9999-12-31T23:59:59.999Z';

/**
 * Which access tokens of a user are refused before they expire (decisions §3), as the log
 * says it, one document per user that ever had such a cut:
 * - deactivated: every token, while inactive; once reactivated, every token issued before the
 *   deactivation;
 * - a password reset: every token issued before it;
 * - a family revoked by detected reuse, a deactivation or a reset: every token of that family.
 *
 * A token is judged by its family, in log order, not by its `iat` (whole seconds, and the clock of
 * whichever process signed it): while a cut matters, only the families opened after it pass (a
 * login right after a reactivation or a reset works at once).
 *
 * Every API process starts from this read model at the projector's checkpoint and follows the
 * log from there (src/auth/access-revocations.ts), so what it refuses follows from the log
 * alone: after a restart without a snapshot, on a new process, after a rebuild.
 */
export interface AccessRevocationDoc {
  readonly id: string;
  readonly inactive: boolean;
  /** The latest deactivation or password reset (ISO 8601), or null. */
  readonly cutAt: string | null;
  /** What made the cut. */
  readonly cutBy: 'deactivation' | 'reset' | 'erasure' | null;
  /** The latest deactivation: a token without a family (never issued by login or refresh) is judged by it alone. */
  readonly deactivatedAt: string | null;
  /** Families opened after `cutAt` in log order (while the cut matters): only their tokens pass. */
  readonly openedAfterCut: readonly string[];
  /** Families whose every access token is refused, with when they were revoked. */
  readonly revokedFamilies: ReadonlyArray<{ readonly familyId: string; readonly at: string }>;
  /** After this instant the document refuses nothing that has not expired anyway. */
  readonly relevantUntil: string;
}

const plus = (iso: string, ms: number): string => new Date(Date.parse(iso) + ms).toISOString();

function withRelevance(doc: Omit<AccessRevocationDoc, 'relevantUntil'>): AccessRevocationDoc {
  if (doc.inactive) return { ...doc, relevantUntil: WHILE_INACTIVE };
  const times = [...(doc.cutAt !== null ? [doc.cutAt] : []), ...doc.revokedFamilies.map((f) => f.at)];
  const latest = times.reduce((max, t) => (t > max ? t : max), '');
  return { ...doc, relevantUntil: latest === '' ? new Date(0).toISOString() : plus(latest, ACCESS_TOKEN_LIFETIME_MS + FORGET_MARGIN_MS) };
}

const empty = (id: string): Omit<AccessRevocationDoc, 'relevantUntil'> => ({ id, inactive: false, cutAt: null, cutBy: null, deactivatedAt: null, openedAfterCut: [], revokedFamilies: [] });

/** Families revoked long enough before `now` that their every token has expired are dropped. */
const current = (families: AccessRevocationDoc['revokedFamilies'], now: string): AccessRevocationDoc['revokedFamilies'] =>
  families.filter((f) => Date.parse(f.at) + ACCESS_TOKEN_LIFETIME_MS + FORGET_MARGIN_MS >= Date.parse(now));

function cut(doc: AccessRevocationDoc | null, id: string, at: string, by: 'deactivation' | 'reset' | 'erasure'): AccessRevocationDoc {
  const base = doc ?? empty(id);
  // An erased user never comes back (a later sync makes a new user): every token stays refused.
  const inactive = by === 'deactivation' || by === 'erasure' || base.inactive;
  const deactivatedAt = by === 'deactivation' ? at : base.deactivatedAt;
  return withRelevance({ ...base, inactive, cutAt: at, cutBy: by, deactivatedAt, openedAfterCut: [], revokedFamilies: current(base.revokedFamilies, at) });
}

/** Pure: the user's document after one event of its user stream or of one of its session streams. */
export function evolveAccessRevocationDoc(doc: AccessRevocationDoc | null, recorded: RecordedEvent, id: string): AccessRevocationDoc | null {
  const event = asHomeHubEvent(recorded);
  if (event === null) return doc;
  switch (event.type) {
    case 'UserDeactivated':
      return cut(doc, id, event.data.deactivatedAt, 'deactivation');
    case 'UserErased':
      return cut(doc, id, event.data.erasedAt, 'erasure');
    case 'UserReactivated':
      return doc === null || !doc.inactive || doc.cutBy === 'erasure' ? doc : withRelevance({ ...doc, inactive: false });
    case 'PasswordChanged':
      return event.data.reason === 'reset' ? cut(doc, id, event.data.changedAt, 'reset') : doc;
    case 'RefreshIssued': {
      // Only the opening of a family (revision 0 of its stream), and only while the cut matters.
      if (doc === null || doc.inactive || doc.cutAt === null || recorded.revision !== 0n) return doc;
      if (Date.parse(event.data.issuedAt) > Date.parse(doc.cutAt) + ACCESS_TOKEN_LIFETIME_MS + FORGET_MARGIN_MS) return doc;
      if (doc.openedAfterCut.includes(event.data.familyId)) return doc;
      return { ...doc, openedAfterCut: [...doc.openedAfterCut, event.data.familyId] };
    }
    case 'RefreshRevoked': {
      if (event.data.reason === 'logout') return doc;
      const base = doc ?? empty(id);
      if (base.revokedFamilies.some((f) => f.familyId === event.data.familyId)) return doc;
      const at = event.data.revokedAt;
      return withRelevance({ ...base, revokedFamilies: [...current(base.revokedFamilies, at), { familyId: event.data.familyId, at }] });
    }
    default:
      return doc;
  }
}

/** The user a `user-` or `session-` event concerns for this model (none for the others). */
export function accessRevocationIds(recorded: RecordedEvent): readonly string[] {
  const stream = parseStreamName(recorded.streamName);
  if (stream === null) return [];
  if (stream.category === 'user') {
    const t = recorded.type;
    return t === 'UserDeactivated' || t === 'UserReactivated' || t === 'PasswordChanged' || t === 'UserErased' ? [stream.id] : [];
  }
  if (stream.category !== 'session') return [];
  if (recorded.type !== 'RefreshRevoked' && !(recorded.type === 'RefreshIssued' && recorded.revision === 0n)) return [];
  const data = recorded.data as { readonly userId?: unknown };
  return typeof data.userId === 'string' ? [data.userId] : [];
}

export const accessRevocationsProjection = documentProjection<AccessRevocationDoc>({
  name: 'access-revocations',
  collection: ACCESS_REVOCATIONS_COLLECTION,
  streamPrefixes: ['user-', 'session-'],
  ids: accessRevocationIds,
  evolve: evolveAccessRevocationDoc,
  indexes: [{ fields: [{ field: 'relevantUntil', order: 'asc' }] }],
});

/** The documents that still refuse something at `now`. */
export async function relevantAccessRevocations(store: ReadStore, now: Date): Promise<AccessRevocationDoc[]> {
  return store.collection<AccessRevocationDoc>(ACCESS_REVOCATIONS_COLLECTION).find({ where: { relevantUntil: { gt: now.toISOString() } } });
}
