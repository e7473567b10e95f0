import { randomUUID } from 'node:crypto';
import { api, CRM_KEY, type TestService } from '../support/harness';
import { twoProcesses } from '../support/two-processes';

/**
 * Decisions §11, across processes: each process caches opened data keys for 30 s. Once an
 * erasure has answered on process `a`, process `b` must not open the person's data any more,
 * even with the key in its cache, and even while `b` kept reading the person's events (and so
 * re-reading the key from the store) during the erasure. The erasure destroys the keys before
 * `UserErased`, every process drops them from its cache when `UserErased` reaches its
 * subscriptions, and the erasure answers only once every API process has applied it.
 */

const ERASED = '[erased]';

async function userSynced(service: TestService, userId: string): Promise<Record<string, unknown> | undefined> {
  for await (const event of service.eventStore.readStream(`user-${userId}`)) {
    if (event.type === 'UserSynced') return event.data as Record<string, unknown>;
  }
  return undefined;
}

describe('an erasure answered on one process holds on the other at once (distributed, two API processes)', () => {
  jest.setTimeout(120_000);
  const processes = twoProcesses();

  test.each([1, 2, 3])('the other process cannot open the person data after the erasure answered (round %i)', async () => {
    const [a, b] = [processes.a(), processes.b()];
    const email = `ines.${randomUUID()}@example.org`;
    const syncId = 500_000 + Math.floor(Math.random() * 400_000);
    const synced = await api(a, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: 'Ines', last_name: 'Cachebust', email, active: true },
    });
    expect(synced.status).toBe(201);
    const userId = (synced.body as { user: { id: string } }).user.id;

    // `b` opens the person's data (its key now cached there), and keeps doing so during the erasure.
    expect(await userSynced(b, userId)).toMatchObject({ email, firstName: 'Ines' });
    let reading = true;
    let readsDuring = 0;
    const reader = (async () => {
      while (reading) {
        await userSynced(b, userId);
        readsDuring++;
      }
    })();
    const erased = await api(a, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
    const after = await userSynced(b, userId);
    reading = false;
    await reader;

    expect(erased).toMatchObject({ status: 200, body: { erased: true, userId } });
    expect(readsDuring).toBeGreaterThan(0);
    expect(after).toMatchObject({ userId, email: ERASED, firstName: ERASED, lastName: ERASED });
    expect(JSON.stringify(after)).not.toContain(email);
  });
});
