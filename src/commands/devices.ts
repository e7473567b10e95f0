import { randomUUID } from 'node:crypto';
import {
  deviceDecider,
  heartbeatReceived,
  DEVICE_MESSAGES,
  type ActiveDevice,
  type DeviceChanges,
  type DeviceCommand,
  type DeviceEvent,
  type DeviceLink,
  type DeviceRole,
  type DeviceState,
  type JsonObject,
  type RecordHeartbeat,
} from '../domain/device';
import { ConflictError, NotFoundError, UnauthorizedError } from '../domain/errors';
import { deviceStream, heartbeatStream } from '../domain/events';
import { USER_MESSAGES } from '../domain/user';
import type { EventStore, GlobalPosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { countOwnedDevices, findDeviceByInternalId } from '../projections/devices';
import { findUserByEmail } from '../projections/users';
import type { Keyring } from '../privacy/keyring';
import type { Watermark } from '../projections/watermark';
import { OneAtATime, type KeyedSerializer } from '../infra/one-at-a-time';
import { createDeviceSnapshots, DEVICE_SNAPSHOT_EVERY } from './snapshots';
import { createDeviceStateCache } from '../privacy/kept-folds';
import { handleCommand, loadAggregate, toNewEvents, type Clock, type CommandContext, type HandledCommand, type StateCache } from './handler';

/** `heartbeat-<uuid>` keeps a week by default: enough for the offline expiry and for auditors, never a long read. */
export const HEARTBEAT_MAX_AGE_SECONDS = 7 * 24 * 60 * 60;

/** Device states kept folded per process (a few hundred bytes each), so a heartbeat reads only what is new. */
export const DEVICE_STATE_CACHE_SIZE = 20_000;

export interface DeviceCommandDeps {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly watermark: Watermark;
  readonly clock: Clock;
  readonly readYourWritesTimeoutMs: number;
  readonly maxDevicesPerUser: number;
  /** The `$maxAge` of `heartbeat-<uuid>` (HEARTBEAT_RETENTION_SECONDS); a week when absent. */
  readonly heartbeatRetentionSeconds?: number;
  /** Folded device states, shared with the expiry worker of this process (src/commands/presence.ts). */
  readonly deviceStates?: StateCache<DeviceState>;
  /** The event store's keyring: a device with no data key yet gets one before its snapshot is due (src/commands/snapshots.ts). */
  readonly keyring?: Pick<Keyring, 'keyFor'>;
  /** Told of every accepted heartbeat (for `heartbeats_accepted_total`). */
  readonly onHeartbeat?: () => void;
  /**
   * Runs what makes a user an owner (registrations, links as owner) one at a time per user:
   * across processes in distributed mode (a lease in Redis); in this process when absent.
   */
  readonly owners?: KeyedSerializer;
}

export interface RegisterDeviceInput {
  readonly uuid: string;
  readonly deviceId: string;
  readonly name: string;
  readonly ipAddress?: string | undefined;
  readonly port?: string | undefined;
  readonly metadata?: JsonObject | undefined;
}

export interface HeartbeatInput {
  readonly ipAddress?: string | undefined;
  readonly metadata?: JsonObject | undefined;
}

export interface LinkResult {
  readonly device: ActiveDevice;
  readonly link: DeviceLink;
  /** True when the user had no link to the device before (201); false for a change or reactivation (200). */
  readonly created: boolean;
}

/** The device as the heartbeat left it. */
export interface HeartbeatResult {
  readonly id: string;
  readonly isOnline: true;
  readonly lastSeenAt: string;
}

/**
 * The device use cases. Every method takes the device's uuid (the API resolves an internal
 * id to it first) and answers only once the read models reflect its write.
 */
export interface DeviceCommands {
  register(input: RegisterDeviceInput, ctx: CommandContext): Promise<ActiveDevice>;
  update(uuid: string, changes: DeviceChanges, ctx: CommandContext): Promise<ActiveDevice>;
  link(uuid: string, target: { readonly email: string; readonly role: DeviceRole }, ctx: CommandContext): Promise<LinkResult>;
  unlink(uuid: string, targetUserId: string, ctx: CommandContext): Promise<void>;
  remove(uuid: string, ctx: CommandContext): Promise<void>;
  /** Moves the token generation on; the caller signs a device token with the new `gen`. */
  issueToken(uuid: string, ctx: CommandContext): Promise<ActiveDevice>;
  /**
   * A hub renews its own token (decisions §4): the device as it stands when its token of
   * generation `tokenGen` is still current; 401 `Token has been revoked` when a newer
   * generation was issued or the device was deleted. Nothing is written.
   */
  renewToken(uuid: string, tokenGen: number): Promise<ActiveDevice>;
  /** The same check as `renewToken`, for a hub's request refused otherwise: a revoked token is told so (401) before anything else. */
  assertCurrentToken(uuid: string, tokenGen: number): Promise<ActiveDevice>;
  /** `tokenGen` is the `gen` claim of the device token that authenticated the heartbeat. */
  heartbeat(uuid: string, tokenGen: number, input: HeartbeatInput, ctx: CommandContext): Promise<HeartbeatResult>;
}

/** Whether the decider accepts this heartbeat on that state (its token current, the device active). */
function acceptsHeartbeat(command: RecordHeartbeat, state: DeviceState): boolean {
  try {
    deviceDecider.decide(command, state);
    return true;
  } catch (error) {
    if (error instanceof UnauthorizedError) return false;
    throw error;
  }
}

function active(state: DeviceState): ActiveDevice {
  // Every command that succeeds on a device leaves it active, except DeleteDevice.
  if (state.status !== 'active') throw new NotFoundError(DEVICE_MESSAGES.notFound);
  return state;
}

/** The user a command acts for: device commands come from users, except heartbeats. */
function actingUser(ctx: CommandContext): string {
  if (ctx.actor.type !== 'user') throw new Error(`a device command needs a user actor, got ${ctx.actor.type}`);
  return ctx.actor.id;
}

export function createDeviceCommands(deps: DeviceCommandDeps): DeviceCommands {
  const { eventStore, readStore, clock } = deps;
  const cache = deps.deviceStates ?? createDeviceStateCache(DEVICE_STATE_CACHE_SIZE);
  const snapshots = createDeviceSnapshots(eventStore, DEVICE_SNAPSHOT_EVERY, deps.keyring);

  const run = (uuid: string, command: DeviceCommand, ctx: CommandContext): Promise<HandledCommand<DeviceState, DeviceEvent>> =>
    handleCommand(eventStore, deviceDecider, deviceStream(uuid), command, ctx, clock, { cache, snapshots });

  /** Read-your-writes: answer only once the projections have applied what was appended. */
  const settle = async (position: GlobalPosition | null): Promise<void> => {
    if (position !== null) await deps.watermark.waitFor(position, deps.readYourWritesTimeoutMs);
  };

  const userIdByEmail = async (email: string): Promise<string> => {
    const user = await findUserByEmail(readStore, email);
    if (user === null) throw new NotFoundError(USER_MESSAGES.notFound);
    return user.id;
  };

  const currentToken = async (uuid: string, tokenGen: number): Promise<ActiveDevice> => {
    const stream = deviceStream(uuid);
    const known = await loadAggregate(eventStore, deviceDecider.evolve, deviceDecider.initialState, stream, cache.get(stream), snapshots);
    if (known.revision >= 0n) cache.set(stream, known);
    if (known.state.status !== 'active' || known.state.gen !== tokenGen) throw new UnauthorizedError(DEVICE_MESSAGES.tokenRevoked);
    return known.state;
  };

  /** What changes how many devices a user owns, one at a time per user (see `register`). */
  const registrations = deps.owners ?? new OneAtATime();

  const registerNow = async (input: RegisterDeviceInput, ctx: CommandContext, actorUserId: string): Promise<ActiveDevice> => {
    const [ownedDeviceCount, shadowed] = await Promise.all([countOwnedDevices(readStore, actorUserId), findDeviceByInternalId(readStore, input.uuid)]);
    // A uuid that is another device's internal id would make `/devices/<id>` ambiguous (decisions §4).
    if (shadowed !== null && shadowed.uuid !== input.uuid) throw new ConflictError(DEVICE_MESSAGES.alreadyRegistered);
    const result = await run(
      input.uuid,
      {
        type: 'RegisterDevice',
        data: {
          id: randomUUID(),
          uuid: input.uuid,
          deviceId: input.deviceId,
          name: input.name,
          ipAddress: input.ipAddress ?? null,
          ...(input.port !== undefined ? { port: input.port } : {}),
          metadata: input.metadata ?? null,
          actorUserId,
          linkId: randomUUID(),
          ownedDeviceCount,
          maxDevicesPerUser: deps.maxDevicesPerUser,
          now: clock.now().toISOString(),
        },
      },
      ctx,
    );
    // Once per registration; setting it again after a re-registration changes nothing.
    await eventStore.setStreamMaxAge(heartbeatStream(input.uuid), deps.heartbeatRetentionSeconds ?? HEARTBEAT_MAX_AGE_SECONDS);
    await settle(result.position);
    return active(result.state);
  };

  return {
    async register(input, ctx) {
      const actorUserId = actingUser(ctx);
      // The count comes from the read model, which each registration updates before it is
      // answered (`settle`): a user's registrations (and links making them an owner) run one at
      // a time, in this process and, in distributed mode, across processes through a lease in
      // Redis, so two at the limit cannot both pass. Without Redis's answer the lease is not
      // waited for (the limit guards against runaway accounts, not safety).
      return await registrations.run(actorUserId, () => registerNow(input, ctx, actorUserId));
    },

    async update(uuid, changes, ctx) {
      const result = await run(uuid, { type: 'UpdateDevice', data: { uuid, actorUserId: actingUser(ctx), changes, now: clock.now().toISOString() } }, ctx);
      await settle(result.position);
      return active(result.state);
    },

    async link(uuid, target, ctx) {
      const targetUserId = await userIdByEmail(target.email);
      const actorUserId = actingUser(ctx);
      const linkNow = async (limit: { ownedDeviceCount: number; maxDevicesPerUser: number } | null): Promise<HandledCommand<DeviceState, DeviceEvent>> => {
        const result = await run(
          uuid,
          { type: 'LinkUser', data: { uuid, actorUserId, targetUserId, role: target.role, linkId: randomUUID(), now: clock.now().toISOString(), ...limit } },
          ctx,
        );
        await settle(result.position);
        return result;
      };
      // Made an owner, the target takes a place of their device limit: counted as their
      // registrations are, one at a time with them in this process (see `register`).
      const result =
        target.role === 'owner'
          ? await registrations.run(targetUserId, async () => linkNow({ ownedDeviceCount: await countOwnedDevices(readStore, targetUserId), maxDevicesPerUser: deps.maxDevicesPerUser }))
          : await linkNow(null);
      const device = active(result.state);
      const link = device.links[targetUserId];
      if (link === undefined) throw new Error('LinkUser left no link behind');
      const created = result.events.some((e) => e.type === 'UserLinked' && !e.data.reactivated);
      return { device, link, created };
    },

    async unlink(uuid, targetUserId, ctx) {
      const result = await run(uuid, { type: 'UnlinkUser', data: { uuid, actorUserId: actingUser(ctx), targetUserId, now: clock.now().toISOString() } }, ctx);
      await settle(result.position);
    },

    async remove(uuid, ctx) {
      const result = await run(uuid, { type: 'DeleteDevice', data: { uuid, actorUserId: actingUser(ctx), now: clock.now().toISOString() } }, ctx);
      await settle(result.position);
    },

    async issueToken(uuid, ctx) {
      const result = await run(uuid, { type: 'IssueDeviceToken', data: { uuid, actorUserId: actingUser(ctx), now: clock.now().toISOString() } }, ctx);
      await settle(result.position);
      return active(result.state);
    },

    renewToken: currentToken,
    assertCurrentToken: currentToken,

    /**
     * The hot path: two event-store calls for a routine heartbeat. It appends the tiny
     * `HeartbeatReceived` to `heartbeat-<uuid>` without reading that stream, then reads what
     * is new in `device-<uuid>` since this process last folded it (only transitions live
     * there, so usually nothing) and appends to the device stream only on a transition. No
     * Redis, no BullMQ: the expiry role schedules from the device streams.
     *
     * The token is checked before anything is written, against this process's fold of the
     * device stream; a device it has not folded yet, or whose fold refuses the token (a newer
     * token may have been issued through another process), is read first (a third call).
     * The fold is current for every change made through this process; a newer token or a
     * deletion made through another API process reaches this one's tunnel live feed, which
     * drops the fold (src/runtime/api.ts), so the next heartbeat reads first and is refused
     * before anything is written. Only a heartbeat within the feed's delay is appended before
     * the read that follows the append refuses it (401).
     *
     * Order matters (the race with an expiry job, src/commands/presence.ts): transitions are
     * decided only after the heartbeat is appended, on a fresh read of the device stream, so
     * an offline transition the job appended meanwhile is seen here and answered with
     * DeviceWentOnline (or the job's re-read of the heartbeat stream sees this heartbeat).
     */
    async heartbeat(uuid, tokenGen, input, ctx) {
      const now = clock.now().toISOString();
      const command: RecordHeartbeat = {
        type: 'RecordHeartbeat',
        data: {
          uuid,
          tokenGen,
          ...(input.ipAddress !== undefined ? { ipAddress: input.ipAddress } : {}),
          ...(input.metadata !== undefined ? { metadata: input.metadata } : {}),
          now,
        },
      };
      const stream = deviceStream(uuid);
      const folded = cache.get(stream);
      // 401 for a revoked token, before the heartbeat is recorded. A fold that refuses it may
      // predate a newer token issued through another process: only a fresh read refuses.
      if (folded === undefined || !acceptsHeartbeat(command, folded.state)) {
        const known = await loadAggregate(eventStore, deviceDecider.evolve, deviceDecider.initialState, stream, folded, snapshots);
        if (known.revision >= 0n) cache.set(stream, known);
        deviceDecider.decide(command, known.state);
      }
      const beat = await eventStore.append(heartbeatStream(uuid), toNewEvents([heartbeatReceived(command)], ctx, now), 'any');
      const result = await run(uuid, command, ctx);
      deps.onHeartbeat?.();
      await settle(result.position ?? beat.position);
      return { id: active(result.state).id, isOnline: true, lastSeenAt: now };
    },
  };
}
