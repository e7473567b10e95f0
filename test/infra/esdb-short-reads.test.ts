import { randomUUID } from 'node:crypto';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import type { EventStore } from '../../src/infra/eventstore/port';
import { startEsdbStandin, type EsdbStandin } from '../support/esdb-standin';

/**
 * Reads of the newest event of a stream (`maxCount: 1`, often left right after that event) and
 * reads of a stream that does not exist yet (every registration) come thousands an hour. Each
 * such read must end without resetting its HTTP/2 stream: HTTP/2 servers may close a
 * connection that resets streams in bulk ("rapid reset" mitigations); the stand-in's did,
 * taking this client's session down after ~4,000 such reads.
 */
describe('EventStoreDB adapter: many short reads', () => {
  let standin: EsdbStandin;
  let store: EventStore;

  beforeAll(async () => {
    standin = await startEsdbStandin();
    store = createEsdbEventStore(standin.url);
  }, 30_000);

  afterAll(async () => {
    await store?.close();
    await standin?.stop();
  });

  test('keep the session: newest-event reads left early, and reads of missing streams', async () => {
    const stream = `heartbeat-${randomUUID()}`;
    const meta = { occurredAt: new Date().toISOString(), actor: { type: 'system' as const, id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'c' };
    for (let i = 0; i < 3; i++) await store.append(stream, [{ id: randomUUID(), type: 'HeartbeatReceived', data: { i }, metadata: meta }], 'any');
    let reads = 0;
    const worker = async (): Promise<void> => {
      while (reads < 7000) {
        reads++;
        if (reads % 8 === 0) {
          for await (const e of store.readStream(`device-${randomUUID()}`)) expect(e).toBeUndefined();
        } else {
          for await (const e of store.readStream(stream, { direction: 'backwards', maxCount: 1 })) {
            expect(e.revision).toBe(2n);
            break;
          }
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    // Still the same, working session.
    const newest = [];
    for await (const e of store.readStream(stream, { direction: 'backwards', maxCount: 1 })) newest.push(e.revision);
    expect(newest).toEqual([2n]);
  }, 60_000);
});
