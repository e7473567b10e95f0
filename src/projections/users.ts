import { asHomeHubEvent, parseStreamName } from '../domain/events';
import { DEFAULT_LANGUAGE, DEFAULT_TIMEZONE, type CrmFields, type UserProfile } from '../domain/user';
import type { RecordedEvent } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { documentProjection } from './projection';

export const USERS_COLLECTION = 'users';

/** The profile as shown: `timezone` and `language` always set (decisions §3), `avatar` null until set. */
export interface ProfileView {
  readonly avatar: string | null;
  readonly timezone: string;
  readonly language: string;
}

export function profileView(profile: UserProfile): ProfileView {
  return { avatar: profile.avatar, timezone: profile.timezone || DEFAULT_TIMEZONE, language: profile.language ?? DEFAULT_LANGUAGE };
}

/** The user read model behind GET /users/me. The role is derived from ADMIN_EMAILS when read. */
export interface UserDoc {
  readonly id: string;
  readonly syncId: number;
  readonly email: string;
  readonly firstName: string;
  readonly lastName: string;
  readonly isActive: boolean;
  readonly isEmailVerified: boolean;
  readonly profile: ProfileView;
  readonly crm: CrmFields;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export function evolveUserDoc(doc: UserDoc | null, recorded: RecordedEvent): UserDoc | null {
  const event = asHomeHubEvent(recorded);
  if (event === null) return doc;
  if (event.type === 'UserSynced') {
    const e = event.data;
    return {
      id: e.userId,
      syncId: e.syncId,
      email: e.email,
      firstName: e.firstName,
      lastName: e.lastName,
      isActive: doc?.isActive ?? true,
      isEmailVerified: e.isEmailVerified,
      profile: profileView(e.profile),
      crm: e.crm,
      createdAt: doc?.createdAt ?? e.syncedAt,
      updatedAt: e.syncedAt,
    };
  }
  if (doc === null) return null;
  switch (event.type) {
    case 'UserDeactivated':
      return { ...doc, isActive: false, updatedAt: event.data.deactivatedAt };
    case 'UserReactivated':
      return { ...doc, isActive: true, updatedAt: event.data.reactivatedAt };
    case 'PasswordChanged':
      return { ...doc, updatedAt: event.data.changedAt };
    case 'EmailVerified':
      return { ...doc, isEmailVerified: true, updatedAt: event.data.verifiedAt };
    case 'UserErased':
      return null;
    default:
      return doc;
  }
}

export const usersProjection = documentProjection<UserDoc>({
  name: 'users',
  collection: USERS_COLLECTION,
  streamPrefixes: ['user-'],
  ids: (event) => {
    const stream = parseStreamName(event.streamName);
    return stream?.category === 'user' ? [stream.id] : [];
  },
  evolve: (doc, event) => evolveUserDoc(doc, event),
  indexes: [{ fields: [{ field: 'email', order: 'asc' }] }],
});

/** The user holding an e-mail address (stored lowercase), or null. */
export async function findUserByEmail(store: ReadStore, email: string): Promise<UserDoc | null> {
  const [user] = await store.collection<UserDoc>(USERS_COLLECTION).find({ where: { email }, limit: 1 });
  return user ?? null;
}
