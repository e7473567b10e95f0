import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { EventStore } from '../../src/infra/eventstore/port';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import type { ReadStore } from '../../src/infra/readstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { createMongoReadStore } from '../../src/infra/readstore/mongo';
import { startEsdbStandin } from './esdb-standin';
import { startJongodb } from './jongodb';

export type EventStoreKind = 'embedded' | 'esdb';
export type ReadStoreKind = 'memory' | 'mongodb';

export interface Opened<T> {
  readonly value: T;
  readonly cleanup: () => Promise<void>;
}

/**
 * The real adapters for tests that run in both modes. EventStoreDB: a real server when
 * EVENTSTORE_URL is set, else the wire-level stand-in; MongoDB: a real server when
 * MONGODB_URI is set, else jongodb.
 */
export async function openEventStore(kind: EventStoreKind): Promise<Opened<EventStore>> {
  if (kind === 'embedded') {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-es-'));
    const store = await openEmbeddedEventStore(dir);
    return {
      value: store,
      cleanup: async () => {
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const external = process.env.EVENTSTORE_URL;
  const standin = external === undefined ? await startEsdbStandin() : null;
  const store = createEsdbEventStore(external ?? standin?.url ?? '');
  return {
    value: store,
    cleanup: async () => {
      await store.close();
      await standin?.stop();
    },
  };
}

export async function openReadStore(kind: ReadStoreKind): Promise<Opened<ReadStore>> {
  if (kind === 'memory') {
    const store = createMemoryReadStore();
    return { value: store, cleanup: () => store.close() };
  }
  const external = process.env.MONGODB_URI;
  const jongodb = external === undefined ? await startJongodb() : null;
  const store = await createMongoReadStore(external ?? jongodb?.uri ?? '', { dbName: `hhc_test_${randomUUID().replace(/-/g, '')}` });
  return {
    value: store,
    cleanup: async () => {
      await store.close();
      await jongodb?.stop();
    },
  };
}

/** A unique suffix so tests against a real, persistent server never collide. */
export function unique(prefix: string): string {
  return `${prefix}${randomUUID().replace(/-/g, '').slice(0, 12)}`;
}
