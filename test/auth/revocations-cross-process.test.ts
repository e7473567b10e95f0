import type { AccessRevocationFeed } from '../../src/auth/access-revocations';
import type { EventStore, Subscription, SubscriptionItem } from '../../src/infra/eventstore/port';
import type { TunnelError } from '../../src/tunnel/events';
import { api, CRM_KEY, type TestService } from '../support/harness';
import { createAccount, login } from '../support/accounts';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { connect, refusal, type Probe } from '../support/tunnel';
import { startTwoProcesses, type StartedProcesses } from '../support/two-processes';

/**
 * Issue 25, point 9: once `POST /auth/sync-customer` with `active: false` has answered on one
 * API process, the other refuses the user's earlier tokens too, on HTTP and on the tunnel —
 * not only once its own feed happens to get there. Every process's revocation feed here
 * receives each deactivation a second late (the lag of a busy process), so an answer that
 * does not wait for every process leaves the window open.
 */

const FEED_LAG_MS = 1000;

/** The event store as the revocation feeds see it: deactivations handed over late. */
function lagging(store: EventStore): EventStore {
  return {
    ...store,
    append: (stream, events, expected) => store.append(stream, events, expected),
    readStream: (stream, options) => store.readStream(stream, options),
    setStreamMaxAge: (stream, seconds) => store.setStreamMaxAge(stream, seconds),
    headPosition: () => store.headPosition(),
    close: () => store.close(),
    subscribe(options) {
      const inner = store.subscribe(options);
      const late: Subscription = {
        close: () => inner.close(),
        async *[Symbol.asyncIterator](): AsyncGenerator<SubscriptionItem> {
          for await (const item of inner) {
            if (item.kind === 'event' && item.event.type === 'UserDeactivated') await new Promise((resolve) => setTimeout(resolve, FEED_LAG_MS));
            yield item;
          }
        },
      };
      return late;
    },
  };
}

jest.mock('../../src/auth/access-revocations', () => {
  const actual = jest.requireActual<typeof import('../../src/auth/access-revocations')>('../../src/auth/access-revocations');
  return {
    ...actual,
    startAccessRevocationFeed: (deps: Parameters<typeof actual.startAccessRevocationFeed>[0]): Promise<AccessRevocationFeed> =>
      actual.startAccessRevocationFeed({ ...deps, eventStore: lagging(deps.eventStore) }),
  };
});

const REVOKED = { statusCode: 401, message: 'Token has been revoked', error: 'Unauthorized' };

async function syncIdOf(service: TestService, userId: string): Promise<number> {
  for await (const event of service.eventStore.readStream(`user-${userId}`)) {
    const data = event.data as { syncId?: unknown };
    if (event.type === 'UserSynced' && typeof data.syncId === 'number') return data.syncId;
  }
  throw new Error('no UserSynced');
}

describe('a deactivation answered on one process holds on the other at once (distributed, two API processes)', () => {
  jest.setTimeout(180_000);
  let smtp: TestSmtpServer;
  let pair: StartedProcesses;
  const sockets: Probe[] = [];

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    pair = await startTwoProcesses({ SMTP_URL: smtp.url });
  }, 120_000);
  afterEach(() => {
    for (const p of sockets.splice(0)) p.close();
  });
  afterAll(async () => {
    await pair?.stop();
    await smtp?.stop();
  });

  it('the next request to the other process is refused, and its socket of that user gets ACCESS_REVOKED', async () => {
    const made = await createAccount(pair.a, smtp);
    const syncId = await syncIdOf(pair.a, made.id);
    const session = await login(pair.a, made.email, made.password);
    const live = await connect(pair.b, session.accessToken);
    sockets.push(live);

    const res = await api(pair.a, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: 'Ada', last_name: 'Lovelace', email: made.email, active: false },
    });
    expect(res.status).toBe(200);

    // No waiting: the very next requests.
    const [onB, devicesOnB, onA] = await Promise.all([
      api(pair.b, 'GET', '/users/me', { token: session.accessToken }),
      api(pair.b, 'GET', '/devices', { token: session.accessToken }),
      api(pair.a, 'GET', '/devices', { token: session.accessToken }),
    ]);
    expect({ b: onB.body, bDevices: devicesOnB.status, aDevices: onA.status }).toEqual({ b: REVOKED, bDevices: 401, aDevices: 401 });
    expect((await live.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).code).toBe('ACCESS_REVOKED');
    expect((await refusal(pair.b, { token: session.accessToken })).message).toBe('unauthorized');
  });
});
