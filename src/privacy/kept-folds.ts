import { createStateCache, type FoldedStream, type StateCache } from '../commands/handler';
import type { DeviceState } from '../domain/device';

/**
 * What a process keeps in memory of a device's fold (decisions §11). A deleted device's fold
 * is kept without its personal fields: name `''`, `ipAddress` and `metadata` null. Its
 * status, links, token generation and revision stay, and they are all that any later
 * decision on the stream reads: every command refuses a deleted device as before (404, or
 * 401 `Token has been revoked` for a hub), a registration again starts afresh from the next
 * token generation (`DeviceRegistered` replaces every field), and the revision is the
 * stream's, so optimistic concurrency is unchanged. What the audit shows is folded from the
 * events, not from here.
 *
 * So once a device is deleted (by its owner, or by an erasure of its only owner) no fold this
 * process keeps holds its name, address or metadata: not the heartbeat path's shared folds
 * (`createDeviceStateCache`), nor the tunnel's (src/tunnel/access.ts). The kept fold is the
 * same shape as the one it replaces, in place of it: no object more per device.
 */
export function keptDeviceFold(folded: FoldedStream<DeviceState>): FoldedStream<DeviceState> {
  const state = folded.state;
  if (state.status !== 'deleted' || (state.name === '' && state.ipAddress === null && state.metadata === null)) return folded;
  return { state: { ...state, name: '', ipAddress: null, metadata: null }, revision: folded.revision };
}

/** Device folds by stream, as the heartbeat path, the expiry jobs and the tunnel share them: deleted devices kept as `keptDeviceFold` says. */
export function createDeviceStateCache(maxEntries: number): StateCache<DeviceState> {
  return createStateCache<DeviceState>(maxEntries, keptDeviceFold);
}
