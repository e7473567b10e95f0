import { randomUUID } from 'node:crypto';
import Redis, { type ChainableCommander, type RedisOptions } from 'ioredis';
import { createAdapter, createShardedAdapter } from '@socket.io/redis-adapter';
import type { Namespace } from 'socket.io';
import type { Logger } from '../logger';
import { SUBSCRIBER_OPTIONS } from '../infra/redis-subscriber';
import { coalesceWrites } from '../infra/redis-writes';
import type { ClusterNotice, DeviceClaim, GoneDevice, RemoteDevice, TunnelCluster } from './cluster';
import { startLiveness } from './cluster-liveness';

/**
 * The tunnel's cluster over Redis (distributed mode): the Socket.IO Redis adapter relays
 * broadcasts, a key per connected device says where it is, and notices between processes
 * enforce one live socket per device. Loaded by `createTunnel` only in distributed mode, so
 * an embedded process never loads ioredis or the adapter.
 */

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
  /** The liveness keys' timings (src/tunnel/cluster-liveness.ts; defaults: DEFAULT_LIVENESS). */
  readonly livenessTtlMs?: number;
  readonly livenessRenewMs?: number;
  readonly livenessSweepMs?: number;
  readonly livenessCacheMs?: number;
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

/**
 * The device record and whether the process it names is alive, in one round trip. The record
 * is `<claim> <owner>:<socket id>` (`<claim> <owner>` when written again after Redis lost it);
 * the owner's liveness key is `<prefix>:alive:<owner>`.
 */
const LOOKUP_SCRIPT = `
local current = redis.call('GET', KEYS[1])
if not current then return {'', 0} end
local owner = string.match(current, '^%d+ ([^:]+)')
if not owner then return {current, 0} end
return {current, redis.call('EXISTS', ARGV[1] .. owner)}
`;

/**
 * The scripts above as commands of the `pub` connection (ioredis's `defineCommand`): each is
 * sent whole once per connection (EVAL), then by its SHA1 only (EVALSHA), and whole again when
 * Redis answers NOSCRIPT (it restarted and lost its scripts). Sent whole with every call, the
 * text was most of the bytes of a handshake's claim and lookup, and of the refresh of every
 * connected device (test/tunnel/handshake-round-trips.test.ts counts them).
 */
interface DeviceScripts {
  hhcClaimDevice(key: string, value: string, ttlMs: string): Promise<unknown>;
  hhcReleaseDevice(key: string, claim: string): Promise<unknown>;
  hhcLookupDevice(key: string, alivePrefix: string): Promise<[string, number]>;
}

interface DevicePipelineScripts {
  hhcRefreshDevice(key: string, claim: string, owner: string, ttlMs: string): ChainableCommander;
}

function withDeviceScripts(redis: Redis): Redis & DeviceScripts {
  redis.defineCommand('hhcClaimDevice', { numberOfKeys: 1, lua: CLAIM_SCRIPT });
  redis.defineCommand('hhcReleaseDevice', { numberOfKeys: 1, lua: RELEASE_SCRIPT });
  redis.defineCommand('hhcRefreshDevice', { numberOfKeys: 1, lua: REFRESH_SCRIPT });
  redis.defineCommand('hhcLookupDevice', { numberOfKeys: 1, lua: LOOKUP_SCRIPT });
  return redis as Redis & DeviceScripts;
}

function claimOf(value: string | null): DeviceClaim {
  if (value === null) return 0;
  const claim = Number(value.split(' ', 1)[0]);
  return Number.isFinite(claim) ? claim : 0;
}

function ownerOf(value: string | null): string | null {
  if (value === null) return null;
  const match = /^\d+ ([^:]+)/.exec(value);
  return match?.[1] ?? null;
}

/** Where a cached answer about a device came from, to order it against what is known. */
type Source = { readonly kind: 'notice' } | { readonly kind: 'lookup'; readonly askedAt: number };

interface Known extends RemoteDevice {
  readonly owner: string | null;
  /** When this was learned: a Redis answer to a question asked earlier cannot replace it. */
  readonly learnedAt: number;
  readonly until: number;
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
  // A handshake's claims, publications and subscriptions, and those of the other handshakes of
  // the same turn, leave in one write per connection (src/infra/redis-writes.ts).
  const pub = coalesceWrites(withDeviceScripts(new Redis(options.url, { ...redisOptions, connectionName: `${prefix}:pub` })));
  const sub = coalesceWrites(new Redis(options.url, { ...redisOptions, ...SUBSCRIBER_OPTIONS, connectionName: `${prefix}:sub` }));
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
  const remote = new Map<string, Known>();
  /** Devices believed connected, by the process holding them: what a death makes gone. */
  const byOwner = new Map<string, Set<string>>();
  const lookups = new Map<string, Promise<RemoteDevice>>();
  const index = (uuid: string, entry: Known | undefined, add: boolean): void => {
    if (entry === undefined || !entry.connected || entry.owner === null) return;
    let set = byOwner.get(entry.owner);
    if (add) {
      if (set === undefined) byOwner.set(entry.owner, (set = new Set()));
      set.add(uuid);
    } else if (set !== undefined) {
      set.delete(uuid);
      if (set.size === 0) byOwner.delete(entry.owner);
    }
  };
  const store = (uuid: string, entry: Known): void => {
    const known = remote.get(uuid);
    index(uuid, known, false);
    remote.delete(uuid);
    remote.set(uuid, entry);
    index(uuid, entry, true);
    if (remote.size > 50_000) {
      const oldest = remote.keys().next().value as string;
      index(oldest, remote.get(oldest), false);
      remote.delete(oldest);
    }
  };
  /**
   * A newer claim always wins. Otherwise a notice wins only when it says the known claim is
   * gone, and a Redis answer only when it was asked after what is known was learned (then it
   * is Redis's state since: a record that is absent, or whose process is dead, is gone).
   * The newest claim seen is kept either way, so that statuses stay ordered.
   */
  const remember = (uuid: string, device: RemoteDevice & { readonly owner: string | null }, source: Source): void => {
    const known = remote.get(uuid);
    const now = Date.now();
    const learnedAt = source.kind === 'lookup' ? source.askedAt : now;
    if (known !== undefined && device.claim <= known.claim) {
      const accepted =
        source.kind === 'notice' ? !device.connected && device.claim === known.claim : source.askedAt >= known.learnedAt;
      if (!accepted) return;
      if (device.claim < known.claim) {
        // Redis no longer has the known claim (released, expired): gone, still ordered by it.
        store(uuid, { connected: false, claim: known.claim, owner: known.owner, learnedAt, until: now + remoteCacheMs });
        return;
      }
    }
    store(uuid, { ...device, learnedAt, until: now + remoteCacheMs });
  };

  // ---- liveness: a key per process (cluster-liveness.ts); the records of its devices point to it.
  let goneListener: (devices: readonly GoneDevice[]) => void = () => undefined;
  /** The process is dead: every device it held is gone (as of `askedAt`), and whoever listens is told. */
  const buried = (who: string, askedAt: number): void => {
    const uuids = byOwner.get(who);
    if (uuids === undefined) return;
    const gone: GoneDevice[] = [];
    for (const uuid of [...uuids]) {
      const known = remote.get(uuid);
      if (known === undefined || !known.connected || known.owner !== who || known.learnedAt > askedAt) continue;
      store(uuid, { connected: false, claim: known.claim, owner: who, learnedAt: askedAt, until: Date.now() + remoteCacheMs });
      gone.push({ uuid, claim: known.claim });
    }
    if (gone.length > 0) goneListener(gone);
  };
  let nsp: Namespace | null = null;
  let reconnected: (why: 'reconnected' | 'revived') => void = () => undefined;
  const liveness = await startLiveness(pub, {
    prefix,
    owner,
    logger: options.logger,
    ...(options.livenessTtlMs !== undefined ? { ttlMs: options.livenessTtlMs } : {}),
    ...(options.livenessRenewMs !== undefined ? { renewMs: options.livenessRenewMs } : {}),
    ...(options.livenessSweepMs !== undefined ? { sweepMs: options.livenessSweepMs } : {}),
    ...(options.livenessCacheMs !== undefined ? { cacheMs: options.livenessCacheMs } : {}),
    owners: () => [...byOwner.keys()],
    onDead: buried,
    onRevived: (why) => reconnected(why),
  });

  return {
    adapter,

    attach(namespace, onNotice) {
      nsp = namespace;
      namespace.on('tunnel:notice', (notice: ClusterNotice) => {
        remember(notice.uuid, { connected: notice.kind === 'device-connected', claim: notice.claim, owner: notice.owner ?? null }, { kind: 'notice' });
        onNotice(notice);
      });
    },

    onReconnect(listener) {
      reconnected = listener;
    },

    onDevicesGone(listener) {
      goneListener = listener;
    },

    async roomsReady() {
      // Commands on one connection run in order: once PING answers, every (S)SUBSCRIBE
      // the adapter sent before it has taken effect.
      await sub.ping();
    },

    async claimDevice(uuid, socketId) {
      const answer = await pub.hhcClaimDevice(deviceKey(uuid), `${owner}:${socketId}`, String(deviceTtlMs));
      const claim = Number(answer);
      if (!Number.isSafeInteger(claim)) throw new Error(`unexpected claim ${String(answer)}`);
      return claim;
    },

    async releaseDevice(uuid, claim) {
      await pub.hhcReleaseDevice(deviceKey(uuid), String(claim));
    },

    async refreshDevices(devices) {
      if (devices.length === 0) return;
      const pipeline = pub.pipeline() as ChainableCommander & DevicePipelineScripts;
      for (const d of devices) pipeline.hhcRefreshDevice(deviceKey(d.uuid), String(d.claim), owner, String(deviceTtlMs));
      await pipeline.exec();
    },

    remoteDevice(uuid) {
      const known = remote.get(uuid);
      // Only "connected" is answered from memory, and only while the process holding the
      // device is known to be alive: a device that connected elsewhere a moment ago is
      // reachable from the moment its client sees `connect` (decisions §5), before its
      // announcement reaches this process, so "not connected" is always asked of Redis.
      if (known !== undefined && known.connected && known.until > Date.now()) {
        const alive = liveness.known(known.owner);
        if (alive === true) return known;
        // One liveness question per process, however many of its devices are asked about.
        if (alive === undefined && known.owner !== null) {
          const who = known.owner;
          return liveness.check(who).then((found) => {
            const now = remote.get(uuid);
            if (now !== undefined && (!now.connected || now.owner !== who)) return now;
            return found ? (now ?? known) : { connected: false, claim: known.claim };
          });
        }
      }
      const pending = lookups.get(uuid);
      if (pending !== undefined) return pending;
      const askedAt = Date.now();
      const lookup = pub
        .hhcLookupDevice(deviceKey(uuid), liveness.alivePrefix)
        .then(([found, alive]) => {
          const value = found === '' ? null : found;
          const who = ownerOf(value);
          if (who !== null) liveness.learn(who, alive === 1 || who === owner, askedAt);
          const device = { connected: value !== null && (alive === 1 || who === owner), claim: claimOf(value), owner: who };
          remember(uuid, device, { kind: 'lookup', askedAt });
          const now = remote.get(uuid);
          return now === undefined ? device : { connected: now.connected, claim: now.claim };
        })
        .finally(() => lookups.delete(uuid));
      lookups.set(uuid, lookup);
      return lookup;
    },

    announce(notice) {
      const stamped: ClusterNotice = { ...notice, owner };
      // serverSideEmit reaches every process but this one, whose own answers must not go stale either.
      remember(notice.uuid, { connected: notice.kind === 'device-connected', claim: notice.claim, owner }, { kind: 'notice' });
      nsp?.serverSideEmit('tunnel:notice', stamped);
    },

    async close() {
      const quit = async (client: Redis): Promise<void> => {
        await Promise.race([client.quit().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
        client.disconnect();
      };
      // Gone at once for the others, rather than when the key expires (the records were released already).
      await liveness.close();
      await Promise.all([quit(pub), quit(sub)]);
    },
  };
}
