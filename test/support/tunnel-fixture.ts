import { createSecretKey } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { createUser, startTestService, type TestService } from './harness';
import { connect, deviceToken, linkUser, registerHub, type Hub, type Probe } from './tunnel';

/**
 * One embedded service for a tunnel test file, with real sockets closed after each test.
 * Call at the top of the file: it registers its own beforeAll/afterEach/afterAll.
 */

type User = Awaited<ReturnType<typeof createUser>>;

export const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export const signWith = (secret: string, claims: Record<string, unknown>): string =>
  jwt.sign(claims, createSecretKey(Buffer.from(secret, 'utf8')), { algorithm: 'HS256' });
export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

export interface TunnelFixture {
  readonly service: () => TestService;
  /** A connected socket, closed after the test. */
  readonly on: (token: string, target?: TestService) => Promise<Probe>;
  /** An owner with a hub, an editor, a viewer and a stranger. */
  readonly household: () => Promise<{ owner: User; editor: User; viewer: User; stranger: User; hub: Hub; token: string }>;
}

export function tunnelFixture(): TunnelFixture {
  let service: TestService | undefined;
  const open: Probe[] = [];
  const current = (): TestService => {
    if (service === undefined) throw new Error('the tunnel fixture has not started yet');
    return service;
  };

  beforeAll(async () => {
    service = await startTestService('embedded');
  }, 60_000);
  afterEach(() => {
    for (const p of open.splice(0)) p.close();
  });
  afterAll(async () => {
    await service?.stop();
  });

  return {
    service: current,
    on: async (token, target = current()) => {
      const p = await connect(target, token);
      open.push(p);
      return p;
    },
    household: async () => {
      const s = current();
      const [owner, editor, viewer, stranger] = await Promise.all([createUser(s), createUser(s), createUser(s), createUser(s)]);
      const hub = await registerHub(s, owner);
      await linkUser(s, hub, owner, editor, 'editor');
      await linkUser(s, hub, owner, viewer, 'viewer');
      return { owner, editor, viewer, stranger, hub, token: await deviceToken(s, hub, owner) };
    },
  };
}
