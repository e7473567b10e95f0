import { UnauthorizedError } from '../domain/errors';
import { sessionStream, userStream } from '../domain/events';
import { userDecider } from '../domain/user';
import type { PasswordHasher } from '../auth/passwords';
import type { CredentialStore } from '../infra/credentials/port';
import type { EventStore, RecordedEvent } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { DEVICES_COLLECTION, metadataOf, type DeviceDoc } from '../projections/devices';
import { SESSIONS_COLLECTION, type SessionDoc } from '../projections/sessions';
import { USERS_COLLECTION, type UserDoc } from '../projections/users';
import { deviceTrailOf } from '../privacy/past-devices';
import type { ErasureCommands } from './erasure';
import { loadAggregate, type Clock, type CommandContext } from './handler';

/**
 * What a person does about their own data (decisions §11): erase their account with their
 * password (`DELETE /users/me`), and export everything the service holds about them
 * (`GET /users/me/export`), decrypted, as one JSON document.
 */

export const INVALID_CREDENTIALS = 'Invalid email or password';

export interface AccountDeps {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly credentials: CredentialStore;
  readonly hasher: PasswordHasher;
  readonly erasure: ErasureCommands;
  readonly clock: Clock;
}

export interface ExportedEvent {
  readonly stream: string;
  readonly revision: number;
  readonly type: string;
  readonly data: unknown;
  readonly occurredAt: string;
}

export interface AccountExport {
  readonly exportedAt: string;
  readonly user: Record<string, unknown>;
  readonly profile: unknown;
  readonly crm: unknown;
  readonly devices: ReadonlyArray<{ readonly device: Record<string, unknown>; readonly role: string; readonly linkedAt: string }>;
  readonly sessions: ReadonlyArray<{
    readonly familyId: string;
    readonly createdAt: string;
    readonly lastUsedAt: string;
    readonly ip: string | null;
    readonly userAgent: string | null;
    readonly status: string;
  }>;
  readonly events: readonly ExportedEvent[];
}

export interface AccountCommands {
  /** 401 `Invalid email or password` unless `password` is the user's. */
  eraseSelf(userId: string, password: string, ctx: CommandContext): Promise<void>;
  /** Null when the user is not (or no longer) known. */
  exportData(userId: string): Promise<AccountExport | null>;
}

function exported(event: RecordedEvent): ExportedEvent {
  return { stream: event.streamName, revision: Number(event.revision), type: event.type, data: event.data, occurredAt: event.metadata.occurredAt };
}

async function readAll(store: EventStore, stream: string): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  for await (const event of store.readStream(stream)) events.push(event);
  return events;
}

export function createAccountCommands(deps: AccountDeps): AccountCommands {
  const { eventStore, readStore } = deps;
  return {
    async eraseSelf(userId, password, ctx) {
      const { state } = await loadAggregate(eventStore, userDecider.evolve, userDecider.initialState, userStream(userId));
      const hash = state.exists && state.passwordVersion > 0 ? await deps.credentials.get(userId, state.passwordVersion) : null;
      const matches = hash === null ? await deps.hasher.verifyNothing(password) : await deps.hasher.verify(hash, password);
      if (!matches) throw new UnauthorizedError(INVALID_CREDENTIALS);
      await deps.erasure.eraseUser(userId, 'self', ctx);
    },

    async exportData(userId) {
      const user = await readStore.collection<UserDoc>(USERS_COLLECTION).get(userId);
      if (user === null) return null;
      const [devices, sessions] = await Promise.all([
        readStore.collection<DeviceDoc>(DEVICES_COLLECTION).find({ where: { 'users.userId': userId }, sort: [{ field: 'createdAt', order: 'asc' }] }),
        readStore.collection<SessionDoc>(SESSIONS_COLLECTION).find({ where: { userId }, sort: [{ field: 'createdAt', order: 'asc' }] }),
      ]);

      const events: ExportedEvent[] = (await readAll(eventStore, userStream(userId))).map(exported);
      const sessionViews: Array<AccountExport['sessions'][number]> = [];
      for (const session of sessions) {
        const stream = await readAll(eventStore, sessionStream(session.id));
        let ip: string | null = null;
        let userAgent: string | null = null;
        for (const event of stream) {
          if (event.type === 'RefreshIssued') {
            const data = event.data as { ip?: string | null; userAgent?: string | null };
            ip = data.ip ?? null;
            userAgent = data.userAgent ?? null;
          }
          if (event.metadata.actor.type === 'user' && event.metadata.actor.id === userId) events.push(exported(event));
        }
        sessionViews.push({ familyId: session.id, createdAt: session.createdAt, lastUsedAt: session.lastIssuedAt, ip, userAgent, status: session.status });
      }
      const deviceViews: Array<AccountExport['devices'][number]> = [];
      for (const doc of devices) {
        const entry = doc.users.find((u) => u.userId === userId);
        if (entry === undefined) continue;
        const { users: _users, access: _access, id: _uuid, internalId, ...device } = doc;
        deviceViews.push({ device: { id: internalId, ...device, metadata: metadataOf(doc) }, role: entry.role, linkedAt: entry.createdAt });
      }
      // Their events on device streams, devices deleted or left since included.
      events.push(...(await deviceTrailOf(eventStore, userId)).acted.map(exported));
      const { profile, crm, ...rest } = user;
      return {
        exportedAt: deps.clock.now().toISOString(),
        user: rest,
        profile,
        crm,
        devices: deviceViews,
        sessions: sessionViews,
        events,
      };
    },
  };
}
