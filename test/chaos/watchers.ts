import type { Collection, Document } from 'mongodb';
import { connectMongo } from '../../src/infra/mongo';
import { GENERATION_COLLECTION, generationPrefix } from '../../src/infra/readstore/generations';
import type { Fault, History } from './history';
import { ok } from './history';
import type { ServiceProcess } from './processes';
import type { TunnelPair } from './tunnel';
import { violation, type World } from './world';

/**
 * What is watched while the faults strike, for the invariants a final look cannot see:
 * - the projector's checkpoint as stored in MongoDB (distributed mode), read directly every
 *   250 ms: its position never decreases, nor its lease epoch (no stale holder's write taken);
 * - the lease tenures, from each process's log ("projector lease acquired" with its epoch,
 *   "projector lease lost" with the moment it stopped being certainly held): no two overlap;
 * - deleted devices, read as the admin every 500 ms: once seen gone, never seen again;
 * - every tunnel message's ack against the hub's socket (tunnel.ts records both).
 */

export const WATCHED_INVARIANTS = ['tunnel acks match the hub socket', 'one projector at a time', 'checkpoint never decreases', 'nothing deleted reappears'] as const;

/** A dead process's hubs read as gone within this (decisions §5). */
const GONE_WITHIN_MS = 30_000;
/** A hub socket that closed this long before a message was sent may still read as connected (the notice is on its way). */
const NOTICE_SLACK_MS = 1000;

export interface Watchers {
  stop(): Promise<void>;
  /** For the report. */
  readonly counts: () => { checkpointReads: number; tenures: number; deletedReads: number };
}

interface Tenure {
  readonly process: string;
  readonly epoch: number;
  readonly start: number;
  end: number;
}

export function watch(options: {
  readonly world: World;
  readonly history: History;
  readonly services: readonly ServiceProcess[];
  readonly mongoUri: string | null;
  readonly targets: readonly string[];
  readonly adminToken: string;
}): Watchers {
  const { world } = options;
  let stopped = false;
  let checkpointReads = 0;
  let deletedReads = 0;
  const tenures: Tenure[] = [];

  // ---- lease tenures from the logs
  for (const service of options.services) {
    service.onLine((line) => {
      if (!line.includes('"projector lease')) return;
      let entry: { msg?: string; time?: string; epoch?: number; heldUntil?: number };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        return;
      }
      if (typeof entry.epoch !== 'number') return;
      if (entry.msg === 'projector lease acquired' && entry.time !== undefined) {
        tenures.push({ process: service.name, epoch: entry.epoch, start: Date.parse(entry.time), end: Number.POSITIVE_INFINITY });
      } else if (entry.msg?.startsWith('projector lease lost') === true && typeof entry.heldUntil === 'number') {
        const tenure = tenures.find((t) => t.epoch === entry.epoch && t.process === service.name);
        if (tenure !== undefined) tenure.end = Math.min(tenure.end, entry.heldUntil);
      }
    });
  }

  // ---- the stored checkpoint
  const checkpointLoop = (async () => {
    if (options.mongoUri === null) return;
    const { client, db } = await connectMongo(options.mongoUri);
    const last = new Map<string, { epoch: number; order: string; value: string }>();
    try {
      while (!stopped) {
        try {
          const record = await db.collection<{ _id: string; generation?: number }>(GENERATION_COLLECTION).findOne({ _id: 'current' });
          const prefix = generationPrefix(record?.generation ?? 0);
          const checkpoints: Collection<Document> = db.collection(`${prefix}checkpoints`);
          const doc = await checkpoints.findOne({ _id: 'projector' as unknown as Document['_id'] });
          checkpointReads += 1;
          const epoch: unknown = doc?.epoch;
          const order: unknown = doc?.order;
          if (typeof epoch === 'number' && typeof order === 'string') {
            const seen = last.get(prefix);
            if (seen !== undefined && order < seen.order) {
              violation(world, 'checkpoint never decreases', `generation "${prefix}": checkpoint ${String(doc?.value)} after ${seen.value}`, null);
            }
            if (seen !== undefined && epoch < seen.epoch) {
              violation(world, 'one projector at a time', `generation "${prefix}": a checkpoint of lease epoch ${epoch} written after one of epoch ${seen.epoch}`, null);
            }
            if (seen === undefined || order >= seen.order) last.set(prefix, { epoch: Math.max(epoch, seen?.epoch ?? 0), order, value: String(doc?.value) });
          }
        } catch {
          // MongoDB busy or restarting: the next read.
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    } finally {
      await client.close();
    }
  })();

  // ---- deleted devices, as clients read them
  const goneSeen = new Set<string>();
  const deletedLoop = (async () => {
    let turn = 0;
    while (!stopped) {
      await new Promise((r) => setTimeout(r, 500));
      const deleted = world.devices.filter((d) => d.exists.certain() === false && d.exists.list().length === 1);
      if (deleted.length === 0) continue;
      for (let i = 0; i < Math.min(4, deleted.length); i++) {
        const device = deleted[(turn * 4 + i) % deleted.length];
        if (device === undefined) continue;
        const target = options.targets[(turn + i) % options.targets.length] ?? '';
        const res = await fetch(`${target}/api/v1/devices/${device.uuid}`, { headers: { Authorization: `Bearer ${options.adminToken}` }, signal: AbortSignal.timeout(2000) }).catch(() => null);
        if (res === null) continue;
        deletedReads += 1;
        if (res.status === 404) goneSeen.add(device.uuid);
        else if (res.status === 200 && goneSeen.has(device.uuid)) {
          violation(world, 'nothing deleted reappears', `device ${device.uuid} read again after it was read as deleted`, device.entity);
        }
        await res.arrayBuffer().catch(() => undefined);
      }
      turn += 1;
    }
  })();

  return {
    counts: () => ({ checkpointReads, tenures: tenures.length, deletedReads }),
    async stop() {
      stopped = true;
      await Promise.allSettled([checkpointLoop, deletedLoop]);
      checkTenures(world, options.history, tenures);
    },
  };
}

/** A tenure ends when its process said the lease was lost, or when the process was killed. */
function checkTenures(world: World, history: History, tenures: readonly Tenure[]): void {
  const kills = history.faults.filter((f) => f.kind.startsWith('kill') || f.kind.startsWith('targeted'));
  const ended = tenures.map((t) => {
    const killedAt = kills.find((f) => f.target === t.process && f.at >= t.start)?.at ?? Number.POSITIVE_INFINITY;
    return { ...t, end: Math.min(t.end, killedAt) };
  });
  // Redis killed and started again empty (it keeps nothing on disk here) forgets the lease, so
  // another process may take it before the holder's own deadline: then only the fence keeps the
  // old holder out (its checkpoints refused, watched above as "a checkpoint of lease epoch …
  // written after one of epoch …"). Such an overlap is the fence's to judge, not the clock's.
  const redisLost = history.faults.filter((f) => f.kind === 'kill-redis');
  const sorted = [...ended].sort((a, b) => a.start - b.start);
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length; j++) {
      const a = sorted[i];
      const b = sorted[j];
      if (a === undefined || b === undefined || b.start >= a.end) continue;
      if (redisLost.some((f) => f.at <= b.start && f.recoveredAt >= a.start)) continue;
      violation(
        world,
        'one projector at a time',
        `${a.process} (epoch ${a.epoch}) held the lease until ${new Date(a.end).toISOString()}, ${b.process} (epoch ${b.epoch}) applied from ${new Date(b.start).toISOString()}`,
        null,
      );
    }
  }
}

/**
 * Every ack `delivered: true` means the hub's socket was connected at that moment, allowing
 * for the notice of a closed socket to travel, and for a dead process's hubs to be found
 * gone (within 30 s of the kill of the process holding them).
 */
export function checkAcks(world: World, pairs: readonly TunnelPair[], faults: readonly Fault[], hubHolder: string | null): number {
  let checked = 0;
  const kills = faults.filter((f) => f.target === hubHolder && (f.kind.startsWith('kill') || f.kind.startsWith('targeted')));
  for (const pair of pairs) {
    for (const ack of pair.acks) {
      if (!ack.delivered) continue;
      checked += 1;
      const connected = pair.hubConnected.some((i) => i.from <= ack.ackedAt && i.to >= ack.sentAt - NOTICE_SLACK_MS);
      if (connected) continue;
      const dying = kills.some((k) => k.at <= ack.ackedAt && ack.sentAt - k.at <= GONE_WITHIN_MS);
      if (dying) continue;
      violation(
        world,
        'tunnel acks match the hub socket',
        `a message sent at ${new Date(ack.sentAt).toISOString()} was acked delivered while the hub's socket was not connected`,
        `device:${pair.deviceUuid}`,
      );
    }
  }
  return checked;
}

/** Acknowledged deletes, for the report. */
export function acknowledgedDeletes(history: History): number {
  return history.operations.filter((op) => op.kind === 'delete-device' && ok(op)).length;
}
