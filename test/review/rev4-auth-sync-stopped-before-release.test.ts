import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EventStore } from '../../src/infra/eventstore/port';
import { startTestService, type TestService, syncCustomer } from '../support/harness';

/**
 * Outside review (round four) of POST /auth/sync-customer, embedded mode, a process that stops
 * between a sync's append to the user's stream and its release of the address the user left
 * (a kill -9, a power cut, the event store refusing the next write).
 *
 * interface.md: "email | string (unique)"; decisions §3: "A new e-mail on a known `id` changes the
 * user's e-mail unless another user holds it (409)": an address no user holds is free, so another
 * customer synced with it is created (201).
 *
 * The stop is made deterministic: the append of the release fails (the process is gone at that
 * instant: nothing after it is done), then the service is started again on the same DATA_DIR.
 * The CRM, which got no answer, sends the same sync again, as it would.
 */
describe('sync-customer: a process stopped between the append and the release (embedded)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-rev4-'));
  let service: TestService | undefined;
  afterAll(async () => {
    await service?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const sync = (s: TestService, id: number, email: string) => syncCustomer(s, id, email);

  it('the address the customer left is free once the service is back and the CRM has sent the sync again', async () => {
    const id = 700_000 + Math.floor(Math.random() * 100_000) * 2;
    const [addrA, addrB] = [`a-${id}@example.com`, `b-${id}@example.com`];

    service = await startTestService('embedded', { DATA_DIR: dir });
    expect((await sync(service, id, addrA)).status).toBe(201);

    // The process stops right after the user's append: its release of A is never made.
    const store = service.eventStore as { append: EventStore['append'] };
    const original = store.append.bind(service.eventStore);
    store.append = async (streamName, events, expected) => {
      if (events.some((e) => e.type === 'ReservationReleased')) throw new Error('process stopped here');
      return original(streamName, events, expected);
    };
    const stopped = await sync(service, id, addrB);
    expect(stopped.status).toBeGreaterThanOrEqual(500);
    store.append = original;
    await service.stop();

    // Started again on the same data.
    service = await startTestService('embedded', { DATA_DIR: dir });
    // The CRM sends the sync it got no answer to again: the customer has B.
    const again = await sync(service, id, addrB);
    expect({ status: again.status, email: (again.body as { user?: { email?: string } }).user?.email }).toEqual({ status: 200, email: addrB });

    // A is nobody's. Actual: 409, A stays reserved for the customer who left it, for good
    // (no later sync of theirs releases it unless they take A back and leave it again).
    const other = await sync(service, id + 1, addrA);
    expect(other.status).toBe(201);
  }, 60_000);
});
