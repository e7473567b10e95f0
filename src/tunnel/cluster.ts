import { randomUUID } from 'node:crypto';
import Redis, { type RedisOptions } from 'ioredis';
import { createAdapter, createShardedAdapter } from '@socket.io/redis-adapter';
import type { Namespace, ServerOptions } from 'socket.io';
import type { Logger } from '../logger';

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
  | { readonly kind: 'device-connected'; readonly uuid: string; readonly claim: DeviceClaim }
  | { readonly kind: 'device-gone'; readonly uuid: string; readonly claim: DeviceClaim };

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
  /** Called after the connection to the other processes was lost and is back (records may be gone). */
  onReconnect(listener: () => void): void;
  /** Keeps the records of the devices this process holds alive (they expire if it dies). */
  refreshDevices(devices: ReadonlyArray<{ readonly uuid: string; readonly claim: DeviceClaim }>): Promise<void>;
  /** Whether the device's socket is held by another process: synchronous when known. */
  remoteDevice(uuid: string): RemoteDevice | Promise<RemoteDevice>;
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
  return {
    adapter: undefined,
    attach: () => undefined,
    roomsReady: () => Promise.resolve(),
    onReconnect: () => undefined,
    claimDevice: () => Promise.resolve(++counter),
    releaseDevice: () => Promise.resolve(),
    refreshDevices: () => Promise.resolve(),
    remoteDevice: () => NOT_CONNECTED,
    announce: () => undefined,
    close: () => Promise.resolve(),
  };
}

// ---------------------------------------------------------------------------------------
// Redis

export type RedisAdapterKind = 'sharded' | 'classic';

export interface RedisClusterOptions {
  readonly url: string;
  /** `sharded`: Redis 7 sharded pub/sub, one channel per room. `classic`: one pattern subscription. */
  readonly adapter: RedisAdapterKind;
  readonly logger: Logger;
  /** Prefix of the keys and channels; lets several deployments share one Redis. */
  readonly prefix?: string;
  /** How long a device record outlives the last refresh of its process. */
  readonly deviceTtlMs?: number;
  /** How long another process's answer about a device is trusted without a notice. */
  readonly remoteCacheMs?: number;
}

/**
 * The claim: Redis's clock in microseconds, and always above the device's previous claim, so
 * claims order connections even across a Redis restart (which loses keys, not the clock).
 */
const CLAIM_SCRIPT = `
local t = redis.call('TIME')
local claim = tonumber(t[1]) * 1000000 + tonumber(t[2])
local current = redis.call('GET', KEYS[1])
if current then
  local previous = tonumber(string.match(current, '^(%d+)'))
  if previous and previous >= claim then claim = previous + 1 end
end
local value = string.format('%.0f', claim) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return string.format('%.0f', claim)
`;

const RELEASE_SCRIPT = `
local current = redis.call('GET', KEYS[1])
if current and string.match(current, '^(%d+)') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`;

/** Extends the record when it is still ours; writes it again when Redis lost it. */
const REFRESH_SCRIPT = `
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
elseif string.match(current, '^(%d+)') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 0
`;

function claimOf(value: string | null): DeviceClaim {
  if (value === null) return 0;
  const claim = Number(value.split(' ', 1)[0]);
  return Number.isFinite(claim) ? claim : 0;
}

async function ready(client: Redis, timeoutMs: number): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`Redis not ready after ${timeoutMs} ms`)), timeoutMs);
    client.once('ready', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

export async function createRedisCluster(options: RedisClusterOptions): Promise<TunnelCluster> {
  const prefix = options.prefix ?? 'hhc:tunnel';
  const deviceTtlMs = options.deviceTtlMs ?? 90_000;
  const remoteCacheMs = options.remoteCacheMs ?? 10_000;
  const owner = randomUUID();
  // Adapter commands must never reject (the adapters do not always catch): while Redis is
  // away they wait in the offline queue, and broadcasts resume when it is back.
  const redisOptions: RedisOptions = { maxRetriesPerRequest: null, enableReadyCheck: true, lazyConnect: false };
  const pub = new Redis(options.url, { ...redisOptions, connectionName: `${prefix}:pub` });
  const sub = new Redis(options.url, { ...redisOptions, connectionName: `${prefix}:sub` });
  pub.on('error', (error: Error) => options.logger.warn({ err: error.message }, 'tunnel redis connection error'));
  sub.on('error', (error: Error) => options.logger.warn({ err: error.message }, 'tunnel redis subscriber connection error'));
  try {
    await Promise.all([ready(pub, 10_000), ready(sub, 10_000)]);
  } catch (error) {
    pub.disconnect();
    sub.disconnect();
    throw error;
  }

  const channelPrefix = `${prefix}:io`;
  const adapter =
    options.adapter === 'sharded'
      ? createShardedAdapter(pub, sub, { channelPrefix, subscriptionMode: 'dynamic' })
      : createAdapter(pub, sub, { key: channelPrefix, publishOnSpecificResponseChannel: true });
  const deviceKey = (uuid: string): string => `${prefix}:device:${uuid}`;

  /** What this process last heard about devices held elsewhere: least recently used first. */
  const remote = new Map<string, RemoteDevice & { readonly until: number }>();
  const lookups = new Map<string, Promise<RemoteDevice>>();
  const remember = (uuid: string, device: RemoteDevice): void => {
    const known = remote.get(uuid);
    if (known !== undefined && known.claim > device.claim) return;
    remote.delete(uuid);
    remote.set(uuid, { ...device, until: Date.now() + remoteCacheMs });
    if (remote.size > 50_000) remote.delete(remote.keys().next().value as string);
  };
  let nsp: Namespace | null = null;
  let reconnected: () => void = () => undefined;
  // 'ready' again after the first time: Redis was away, and may have come back empty.
  pub.on('ready', () => reconnected());

  return {
    adapter,

    attach(namespace, onNotice) {
      nsp = namespace;
      namespace.on('tunnel:notice', (notice: ClusterNotice) => {
        remember(notice.uuid, { connected: notice.kind === 'device-connected', claim: notice.claim });
        onNotice(notice);
      });
    },

    onReconnect(listener) {
      reconnected = listener;
    },

    async roomsReady() {
      // Commands on one connection run in order: once PING answers, every (S)SUBSCRIBE
      // the adapter sent before it has taken effect.
      await sub.ping();
    },

    async claimDevice(uuid, socketId) {
      const answer = await pub.eval(CLAIM_SCRIPT, 1, deviceKey(uuid), `${owner}:${socketId}`, String(deviceTtlMs));
      const claim = Number(answer);
      if (!Number.isSafeInteger(claim)) throw new Error(`unexpected claim ${String(answer)}`);
      return claim;
    },

    async releaseDevice(uuid, claim) {
      await pub.eval(RELEASE_SCRIPT, 1, deviceKey(uuid), String(claim));
    },

    async refreshDevices(devices) {
      if (devices.length === 0) return;
      const pipeline = pub.pipeline();
      for (const d of devices) pipeline.eval(REFRESH_SCRIPT, 1, deviceKey(d.uuid), String(d.claim), owner, String(deviceTtlMs));
      await pipeline.exec();
    },

    remoteDevice(uuid) {
      const known = remote.get(uuid);
      // Only "connected" is answered from memory: a device that connected elsewhere a moment
      // ago is reachable from the moment its client sees `connect` (decisions §5), before
      // its announcement reaches this process, so "not connected" is always asked of Redis.
      if (known !== undefined && known.connected && known.until > Date.now()) return known;
      const pending = lookups.get(uuid);
      if (pending !== undefined) return pending;
      const lookup = pub
        .get(deviceKey(uuid))
        .then((value) => {
          const device = { connected: value !== null, claim: claimOf(value) };
          remember(uuid, device);
          return remote.get(uuid) ?? device;
        })
        .finally(() => lookups.delete(uuid));
      lookups.set(uuid, lookup);
      return lookup;
    },

    announce(notice) {
      // serverSideEmit reaches every process but this one, whose own answers must not go stale either.
      remember(notice.uuid, { connected: notice.kind === 'device-connected', claim: notice.claim });
      nsp?.serverSideEmit('tunnel:notice', notice);
    },

    async close() {
      const quit = async (client: Redis): Promise<void> => {
        await Promise.race([client.quit().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
        client.disconnect();
      };
      await Promise.all([quit(pub), quit(sub)]);
    },
  };
}
