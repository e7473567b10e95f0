import { ConflictError, NotFoundError } from '../domain/errors';
import { deviceDecider, type DeviceState } from '../domain/device';
import { deviceStream, sessionStream, userStream } from '../domain/events';
import type { Actor } from '../domain/messages';
import { crmCustomerStream, reservationDecider } from '../domain/reservation';
import type { RevokeReason } from '../domain/session';
import { USER_MESSAGES, userDecider, type ErasureReason } from '../domain/user';
import type { EventStore, GlobalPosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { DataKeyUnreadableError, deviceSubject, userSubject, type Keyring } from '../privacy/keyring';
import { ERASED } from '../privacy/personal-fields';
import { deletedAsSoleOwner, deviceTrailOf } from '../privacy/past-devices';
import type { PlaintextEraser, PlaintextReport } from '../privacy/plaintext';
import { DEVICES_COLLECTION, type DeviceDoc } from '../projections/devices';
import { SESSIONS_COLLECTION, type SessionDoc } from '../projections/sessions';
import { USERS_COLLECTION, type UserDoc } from '../projections/users';
import type { Watermark } from '../projections/watermark';
import { handleCommand, loadAggregate, type Clock, type CommandContext, type StateCache } from './handler';
import { userStatus, wasErased } from './reservations';

/**
 * Erasure of a person (decisions §11), by the CRM or by the person. In order:
 *   1. each of their links ends (`UserUnlinked`), and a device whose only active owner they
 *      were is deleted (`DeviceDeleted`); all appended with the actor `system`;
 *   2. their refresh-token families are revoked;
 *   3. their data key (and the keys of the devices deleted with them) and their password
 *      hashes are destroyed: every sealed field of theirs in the log reads "[erased]"; what
 *      events written before sealing hold of theirs in the clear is rewritten erased
 *      (embedded) or reported (distributed: `plaintext`, src/privacy/plaintext.ts);
 *   4. `UserErased` on their stream: every process refuses their tokens from then on, closes
 *      their sockets and drops the keys of 3 from its cache (src/privacy/event-store.ts), and
 *      the users read model drops them; the erasure waits until every API process has applied
 *      it (the revocation reach, as deactivations do), so once it answers no process can still
 *      open the person's data from a cached key (the keys were gone from the store before
 *      `UserErased`, so a process reading them again finds nothing);
 *   5. their e-mail and CRM id are released, so a later sync creates a new user (that they are
 *      free follows from `UserErased` already: a claim that finds them held by an erased user
 *      takes them over, src/commands/reservations.ts; the releases record it);
 *   6. `afterErasure` (embedded mode: a new start snapshot, so the old one, which held
 *      their read-model documents, is replaced on disk).
 * Every step is idempotent, so an erasure that failed half-way is finished by asking again:
 * before `UserErased` the person still exists and every step runs again; after it (a kill -9,
 * a snapshot write that failed), `finishErased` destroys the keys again, releases the CRM id
 * and replaces the start snapshot, also when the CRM asks again for a customer erased before.
 * Their e-mail reservation, named by their address (gone with their key), is left held by the
 * erased user when a kill -9 came before step 5: the next claim of that address takes it over.
 *
 * A data key of the person (or of a device linked to them) that is kept but damaged (it does
 * not open: DataKeyUnreadableError, a 503 everywhere else) does not block their erasure: what
 * it sealed is lost already, so the erasure destroys that key first and goes on, every field it
 * sealed reading "[erased]"; the e-mail to release then comes from the users read model.
 */

export interface ErasureDeps {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly watermark: Watermark;
  readonly clock: Clock;
  readonly readYourWritesTimeoutMs: number;
  readonly keyring: Keyring;
  readonly releaseEmail: (email: string, userId: string, ctx: CommandContext) => Promise<void>;
  readonly revokeSessions: (userId: string, reason: RevokeReason, ctx: CommandContext) => Promise<void>;
  /**
   * Personal fields of the person that events written before sealing hold in the clear:
   * rewritten erased where the log can (embedded), reported where it cannot (distributed).
   */
  readonly plaintext?: PlaintextEraser;
  /** Told of what `plaintext` could not rewrite (stream names and a count, never data). */
  readonly onPlaintextLeft?: (report: PlaintextReport) => void;
  /** Resolves once every API process has applied the log up to `position` (their revocation feeds). */
  readonly revocationsApplied?: (position: GlobalPosition) => Promise<void>;
  readonly afterErasure?: () => Promise<void>;
  /**
   * This process's device folds (src/privacy/kept-folds.ts): the links ended and the devices
   * deleted go through them, so once the erasure answers none keeps a fold of a device deleted
   * with the person (other processes drop theirs as their feeds hand them the deletion).
   */
  readonly deviceStates?: StateCache<DeviceState>;
}

export interface ErasureCommands {
  /** 404 `User not found` for a CRM id never synced; an erased customer again: its user id. */
  eraseCustomer(syncId: number, ctx: CommandContext): Promise<{ readonly userId: string }>;
  eraseUser(userId: string, reason: ErasureReason, ctx: CommandContext): Promise<void>;
}

const SYSTEM: Actor = { type: 'system', id: 'erasure' };
const crmReservation = reservationDecider('crm-customer');
/** How often one link is decided again after a concurrent change refused the last decision. */
const MAX_LINK_ATTEMPTS = 5;

export function createErasureCommands(deps: ErasureDeps): ErasureCommands {
  const { eventStore, readStore, clock } = deps;
  const asSystem = (ctx: CommandContext): CommandContext => ({ ...ctx, actor: SYSTEM });

  /** Ends the user's links; returns the devices deleted because they were the only active owner. */
  const endLinks = async (userId: string, ctx: CommandContext, track: (p: GlobalPosition | null) => void): Promise<string[]> => {
    const docs = await readStore.collection<DeviceDoc>(DEVICES_COLLECTION).find({ where: { 'users.userId': userId } });
    const deleted: string[] = [];
    for (const doc of docs) {
      const stream = deviceStream(doc.uuid);
      // Decided again on each attempt: another erasure running at the same time (the same
      // person asked twice, or a co-owner erased together with them) may have ended this link,
      // deleted the device or left this person its last owner in between.
      for (let attempt = 0; ; attempt++) {
        const { state } = await loadAggregate<DeviceState, Parameters<typeof deviceDecider.evolve>[1]>(
          eventStore,
          deviceDecider.evolve,
          deviceDecider.initialState,
          stream,
        );
        if (state.status !== 'active') break;
        const link = state.links[userId];
        if (link === undefined || !link.isActive) break;
        const otherOwners = Object.values(state.links).filter((l) => l.isActive && l.role === 'owner' && l.userId !== userId).length;
        const now = clock.now().toISOString();
        const soleOwner = link.role === 'owner' && otherOwners === 0;
        try {
          const result = await handleCommand(
            eventStore,
            deviceDecider,
            stream,
            soleOwner
              ? { type: 'DeleteDevice', data: { uuid: doc.uuid, actorUserId: userId, now, endActorLink: true } }
              : { type: 'UnlinkUser', data: { uuid: doc.uuid, actorUserId: userId, targetUserId: userId, now } },
            asSystem(ctx),
            clock,
            deps.deviceStates !== undefined ? { cache: deps.deviceStates } : {},
          );
          track(result.position);
          if (soleOwner) deleted.push(doc.uuid);
          break;
        } catch (error) {
          const raced = error instanceof NotFoundError || error instanceof ConflictError;
          if (!raced || attempt >= MAX_LINK_ATTEMPTS) throw error;
        }
      }
    }
    return deleted;
  };

  /** The devices the person was the only active owner of when they were deleted, other than `now`. */
  const earlierSoleOwned = async (userId: string, now: readonly string[]): Promise<string[]> => {
    const { devices } = await deviceTrailOf(eventStore, userId);
    const found: string[] = [];
    for (const uuid of devices) {
      if (!now.includes(uuid) && (await deletedAsSoleOwner(eventStore, uuid, userId))) found.push(uuid);
    }
    return found;
  };

  /**
   * The steps after `UserErased`, done again for an erasure that stopped after it (a kill -9):
   * the keys destroyed (again), the CRM id released, the start snapshot replaced. Each is
   * idempotent. The e-mail reservation is named by the address, which is gone by then: still
   * held by the erased user, it is free all the same (the next claim takes it over).
   */
  const finishErased = async (userId: string, ctx: CommandContext): Promise<void> => {
    let syncId: number | null = null;
    for await (const recorded of eventStore.readStream(userStream(userId), { direction: 'backwards', maxCount: 1 })) {
      if (recorded.type === 'UserErased') syncId = (recorded.data as { syncId: number }).syncId;
    }
    const devices = await earlierSoleOwned(userId, []);
    await deps.keyring.destroy([userSubject(userId), ...devices.map(deviceSubject)], userId);
    if (syncId !== null) {
      const released = await handleCommand(eventStore, crmReservation, crmCustomerStream(syncId), { type: 'Release', data: { ownerId: userId } }, asSystem(ctx), clock);
      if (released.position !== null) await deps.watermark.waitFor(released.position, deps.readYourWritesTimeoutMs);
    }
    await deps.afterErasure?.();
  };

  const erase = async (userId: string, reason: ErasureReason, ctx: CommandContext, knownEmail: string | null): Promise<void> => {
    const before = await loadAggregate(eventStore, userDecider.evolve, userDecider.initialState, userStream(userId));
    if (!before.state.exists) {
      if (await wasErased(eventStore, userId)) await finishErased(userId, ctx);
      return;
    }
    const { syncId } = before.state;
    // "[erased]" when their key is gone already (an erasure that stopped half-way, a damaged
    // key): their reservation is named by the address the users read model still holds.
    const email = before.state.email !== ERASED ? before.state.email : (knownEmail ?? (await readStore.collection<UserDoc>(USERS_COLLECTION).get(userId))?.email ?? null);
    const seen: { last: GlobalPosition | null } = { last: null };
    const track = (position: GlobalPosition | null): void => {
      if (position !== null) seen.last = position;
    };
    // Their sessions' streams, found while the sessions read model still lists them.
    const sessions = await readStore.collection<SessionDoc>(SESSIONS_COLLECTION).find({ where: { userId } });
    const devices = await endLinks(userId, ctx, track);
    await deps.revokeSessions(userId, 'erased', asSystem(ctx));
    // Devices deleted before this erasure (by the person, or by an erasure of theirs that
    // stopped half-way) whose only active owner they were then: their data goes with the person's.
    const earlier = await earlierSoleOwned(userId, devices);
    const shredded = [...devices, ...earlier];
    const subjects = [userSubject(userId), ...shredded.map(deviceSubject)];
    await deps.keyring.destroy(subjects, userId);
    if (deps.plaintext !== undefined) {
      const streams = [userStream(userId), ...sessions.map((s) => sessionStream(s.id)), ...shredded.map(deviceStream)];
      const report = await deps.plaintext({ subjects, streams });
      if (report.left.length > 0) deps.onPlaintextLeft?.(report);
    }
    const erased = await handleCommand(
      eventStore,
      userDecider,
      userStream(userId),
      // Every device whose key went with theirs, those deleted before included: each process drops
      // those keys, and what it opened with them, when it reads `UserErased` (src/privacy/event-store.ts).
      { type: 'EraseUser', data: { userId, reason, devices: shredded, now: clock.now().toISOString() } },
      ctx,
      clock,
    );
    track(erased.position);
    if (erased.position !== null) await deps.revocationsApplied?.(erased.position);
    if (email !== null && email !== ERASED) await deps.releaseEmail(email, userId, asSystem(ctx));
    const released = await handleCommand(
      eventStore,
      crmReservation,
      crmCustomerStream(syncId),
      { type: 'Release', data: { ownerId: userId } },
      asSystem(ctx),
      clock,
    );
    track(released.position);
    if (seen.last !== null) await deps.watermark.waitFor(seen.last, deps.readYourWritesTimeoutMs);
    await deps.afterErasure?.();
  };

  /**
   * Runs `work` (reads of the person's events included); a damaged key of the person, or of a
   * device linked to them, is destroyed and `work` run again, once per key.
   */
  const despiteDamagedKeys = async <T>(userId: string, work: (knownEmail: string | null) => Promise<T>): Promise<T> => {
    const destroyed = new Set<string>();
    let knownEmail: string | null = null;
    for (;;) {
      try {
        return await work(knownEmail);
      } catch (error) {
        if (!(error instanceof DataKeyUnreadableError) || destroyed.has(error.subject)) throw error;
        const linked = await readStore.collection<DeviceDoc>(DEVICES_COLLECTION).find({ where: { 'users.userId': userId } });
        const ours = new Set([userSubject(userId), ...linked.map((d) => deviceSubject(d.uuid))]);
        if (!ours.has(error.subject)) throw error;
        // Taken before the person's own key goes: their reservation is named by their address.
        knownEmail ??= (await readStore.collection<UserDoc>(USERS_COLLECTION).get(userId))?.email ?? null;
        await deps.keyring.destroy([error.subject]);
        destroyed.add(error.subject);
      }
    }
  };

  return {
    async eraseCustomer(syncId, ctx) {
      // Everyone who held the CRM id, the latest first; `held`: who holds it now.
      const holders: string[] = [];
      let held: string | null = null;
      for await (const recorded of eventStore.readStream(crmCustomerStream(syncId))) {
        const event = { type: recorded.type, data: recorded.data } as Parameters<typeof crmReservation.evolve>[1];
        if (event.type === 'ReservationClaimed') {
          held = event.data.ownerId;
          holders.unshift(held);
        } else if (event.data.ownerId === held) held = null;
      }
      // Only a user who exists, or was erased, is this customer: an id claimed by a sync that was
      // refused (the address taken) never became a user. One who held the CRM id before is the
      // customer only if erased (the same answer again); what an erasure that stopped after
      // `UserErased` left undone is done now (each step idempotent).
      for (const userId of new Set(holders)) {
        const status = await userStatus(eventStore, userId);
        if (status === 'erased') {
          await finishErased(userId, ctx);
          return { userId };
        }
        if (status === 'live' && userId === held) {
          await despiteDamagedKeys(userId, (knownEmail) => erase(userId, 'crm', ctx, knownEmail));
          return { userId };
        }
      }
      throw new NotFoundError(USER_MESSAGES.notFound);
    },
    async eraseUser(userId, reason, ctx) {
      await despiteDamagedKeys(userId, async (knownEmail) => {
        const known = await loadAggregate(eventStore, userDecider.evolve, userDecider.initialState, userStream(userId));
        if (!known.state.exists) {
          if (await wasErased(eventStore, userId)) return;
          throw new NotFoundError(USER_MESSAGES.notFound);
        }
        try {
          await erase(userId, reason, ctx, knownEmail);
        } catch (error) {
          if (error instanceof ConflictError) throw new ConflictError('The account was changed concurrently, please retry');
          throw error;
        }
      });
    },
  };
}
