import type { Namespace, ServerOptions } from 'socket.io';

/**
 * What the tunnel needs from the other API processes, behind one interface with two
 * implementations: one process (embedded mode: the in-memory adapter, nothing to share)
 * and Redis (distributed mode: the Socket.IO Redis adapter relays broadcasts, a key per
 * connected device says where it is, and notices between processes enforce one live
 * socket per device).
 */

/** Orders connections of one device: the greater claim is the newer one and wins. */
export type DeviceClaim = number;

/** Told to every other API process (Socket.IO `serverSideEmit`). */
export type ClusterNotice =
  | { readonly kind: 'device-connected'; readonly uuid: string; readonly claim: DeviceClaim; readonly owner?: string }
  | { readonly kind: 'device-gone'; readonly uuid: string; readonly claim: DeviceClaim; readonly owner?: string };

/** A device whose socket was held by a process that died (its liveness key expired). */
export interface GoneDevice {
  readonly uuid: string;
  readonly claim: DeviceClaim;
}

export interface InterServerEvents {
  'tunnel:notice': (notice: ClusterNotice) => void;
}

export interface TunnelCluster {
  /** The Socket.IO adapter for every namespace; undefined: the in-memory one. */
  readonly adapter: ServerOptions['adapter'] | undefined;
  /** Starts listening for notices from the other processes; called once the namespace exists. */
  attach(nsp: Namespace, onNotice: (notice: ClusterNotice) => void): void;
  /** Resolves once rooms joined so far receive broadcasts from every process. */
  roomsReady(): Promise<void>;
  /** Records that this process holds the device's socket; the answer orders it against other connections. */
  claimDevice(uuid: string, socketId: string): Promise<DeviceClaim>;
  /** Forgets the record, unless a newer claim replaced it. */
  releaseDevice(uuid: string, claim: DeviceClaim): Promise<void>;
  /**
   * Called after the connection to the other processes was lost and is back (records may be
   * gone), or when this process finds its own liveness key expired (the others took it for dead).
   */
  onReconnect(listener: (why: 'reconnected' | 'revived') => void): void;
  /** Called with the devices held by a process found dead (its liveness key expired), on a sweep. */
  onDevicesGone(listener: (devices: readonly GoneDevice[]) => void): void;
  /** Keeps the records of the devices this process holds alive (they expire if it dies). */
  refreshDevices(devices: ReadonlyArray<{ readonly uuid: string; readonly claim: DeviceClaim }>): Promise<void>;
  /** Whether the device's socket is held by another process: synchronous when known. */
  remoteDevice(uuid: string): RemoteDevice | Promise<RemoteDevice>;
  /** Tells every other process (the notice is stamped with this process's owner id). */
  announce(notice: ClusterNotice): void;
  close(): Promise<void>;
}

export interface RemoteDevice {
  readonly connected: boolean;
  /** The newest claim seen for the device, connected or not (0 when none). */
  readonly claim: DeviceClaim;
}

const NOT_CONNECTED: RemoteDevice = Object.freeze({ connected: false, claim: 0 });

/** One process: claims are a counter, there is nobody to tell. */
export function createLocalCluster(): TunnelCluster {
  let counter = 0;
  /** The last claim of each device, which orders its statuses after it dropped (least recently claimed first). */
  const last = new Map<string, DeviceClaim>();
  return {
    adapter: undefined,
    attach: () => undefined,
    roomsReady: () => Promise.resolve(),
    onReconnect: () => undefined,
    onDevicesGone: () => undefined,
    claimDevice: (uuid) => {
      const claim = ++counter;
      last.delete(uuid);
      last.set(uuid, claim);
      if (last.size > 50_000) last.delete(last.keys().next().value as string);
      return Promise.resolve(claim);
    },
    releaseDevice: () => Promise.resolve(),
    refreshDevices: () => Promise.resolve(),
    remoteDevice: (uuid) => {
      const claim = last.get(uuid);
      return claim === undefined ? NOT_CONNECTED : { connected: false, claim };
    },
    announce: () => undefined,
    close: () => Promise.resolve(),
  };
}

// ---------------------------------------------------------------------------------------
// Redis
