import { randomUUID } from 'node:crypto';
import { io } from 'socket.io-client';
import { type TestService, createUser, startTestService } from '../support/harness';
import { TEST_SECRETS } from '../support/server';
import { connect, deviceToken, refusal, registerHub } from '../support/tunnel';
import { nowSeconds, signWith, tunnelFixture } from '../support/tunnel-fixture';

/**
 * The tunnel handshake's token paths after the handshake began to pick the verification from
 * the token's unverified `type` claim (src/tunnel/connection.ts, src/auth/tokens.ts
 * `unverifiedTokenType`), and admission's use of the same claim (src/tunnel/admission.ts): no
 * token gets in as the wrong kind, each is refused with `unauthorized` (decisions §5), and a
 * claim forged to look like an app's does not get a hub past admission.
 */

const fixture = tunnelFixture();
const { household, on } = fixture;

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');
/** A JWT with the given header and claims and whatever signature segment is given. */
const forged = (header: Record<string, unknown>, claims: Record<string, unknown>, signature = ''): string => `${b64(header)}.${b64(claims)}.${signature}`;
/** A signed token whose claims were swapped afterwards (the signature is of the original). */
const reclaimed = (token: string, claims: Record<string, unknown>): string => {
  const [header, , signature] = token.split('.');
  return `${header ?? ''}.${b64(claims)}.${signature ?? ''}`;
};

describe('token confusion', () => {
  test('no forged, re-typed or mis-signed token gets in, as either kind', async () => {
    const { owner, hub, token } = await household();
    const gen = (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { gen: number }).gen;
    const deviceClaims = { sub: hub.id, deviceUuid: hub.uuid, gen, type: 'device' };
    const appClaims = { sub: owner.id, email: owner.email, role: 'user', type: 'access' };
    const cases: Array<[string, string]> = [
      ['alg none, device claims', forged({ alg: 'none', typ: 'JWT' }, deviceClaims)],
      ['alg none, access claims', forged({ alg: 'none', typ: 'JWT' }, appClaims)],
      ['an access token re-typed as a device (signature of the original)', reclaimed(owner.accessToken, { ...appClaims, ...deviceClaims })],
      ['a device token re-typed as access (signature of the original)', reclaimed(token, { ...deviceClaims, ...appClaims })],
      ['device claims typed access, signed by the device key', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { ...deviceClaims, type: 'access' })],
      ['device and app claims typed access, signed by the device key', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { ...deviceClaims, ...appClaims })],
      ['app claims typed device, signed by the access key', signWith(TEST_SECRETS.JWT_ACCESS_SECRET, { ...appClaims, ...deviceClaims })],
      ['device claims with no type, device key', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { sub: hub.id, deviceUuid: hub.uuid, gen })],
      ['app claims with no type, access key', signWith(TEST_SECRETS.JWT_ACCESS_SECRET, { sub: owner.id, email: owner.email, role: 'user' })],
      ['type Access, access key', signWith(TEST_SECRETS.JWT_ACCESS_SECRET, { ...appClaims, type: 'Access' })],
      ['type DEVICE, device key', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { ...deviceClaims, type: 'DEVICE' })],
      ['type as an array', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { ...deviceClaims, type: ['device'] })],
      ['device claims under the refresh key', signWith(TEST_SECRETS.JWT_REFRESH_SECRET, deviceClaims)],
      ['app claims under the refresh key', signWith(TEST_SECRETS.JWT_REFRESH_SECRET, appClaims)],
      ['a refresh token', fixture.service().tokens.signRefresh({ sub: owner.id, fam: randomUUID() }).token],
      ['device claims under a wrong key', signWith('another-secret-0123456789abcdef0123456789', deviceClaims)],
      ['a payload that is not JSON', `${b64({ alg: 'HS256', typ: 'JWT' })}.${Buffer.from('{"type":"access"').toString('base64url')}.x`],
      ['a payload that is JSON null', `${b64({ alg: 'HS256', typ: 'JWT' })}.${Buffer.from('null').toString('base64url')}.x`],
    ];
    const outcomes: Array<[string, string]> = [];
    for (const [name, forgedToken] of cases) {
      const error = await refusal(fixture.service(), { token: forgedToken });
      outcomes.push([name, error.message]);
    }
    expect(outcomes).toEqual(cases.map(([name]) => [name, 'unauthorized']));
    // The genuine ones still get in, as their own kind.
    const app = await on(owner.accessToken);
    const device = await on(token);
    expect([app.socket.connected, device.socket.connected]).toEqual([true, true]);
  });

  /**
   * FINDING (detail of the refusal). A device token is refused with the message its own
   * verification gives (test/tunnel/connection.test.ts), `Token has expired` when it expired.
   * An access token whose claims say `access` is now verified as one first, but when that fails
   * for any reason but a revocation the handshake still goes on to verify it as a device token
   * and answers what that says: an expired access token is told `Invalid token` (decisions §7
   * names `Token has expired` for it), though the handshake knows it was an access token.
   */
  test('an expired access token is refused as expired, as the same token is over HTTP', async () => {
    const { owner } = await household();
    const expired = signWith(TEST_SECRETS.JWT_ACCESS_SECRET, { sub: owner.id, email: owner.email, role: 'user', type: 'access', exp: nowSeconds() - 5 });
    const error = await refusal(fixture.service(), { token: expired });
    expect({ message: error.message, data: error.data }).toEqual({ message: 'unauthorized', data: { message: 'Token has expired' } });
  });
});

describe('admission reads the same claim', () => {
  let paced: TestService;
  beforeAll(async () => {
    paced = await startTestService('embedded', { TUNNEL_HANDSHAKES_PER_SECOND: '1' });
  }, 60_000);
  afterAll(async () => {
    await paced?.stop();
  });

  test('a hub whose token is re-typed to look like an app is not let past the pace as a device; an app is never held back', async () => {
    const owner = await createUser(paced);
    const hubs = await Promise.all([registerHub(paced, owner), registerHub(paced, owner)]);
    const tokens = await Promise.all(hubs.map((hub) => deviceToken(paced, hub, owner)));
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const first = await connect(paced, tokens[0] ?? '');
    try {
      const second = tokens[1] ?? '';
      const claims = JSON.parse(Buffer.from(second.split('.')[1] ?? '', 'base64url').toString()) as Record<string, unknown>;
      // Past admission (it looks like an app), but not in: its signature no longer matches.
      const sneaking = await refusal(paced, { token: reclaimed(second, { ...claims, type: 'access' }) });
      expect(sneaking.message).toBe('unauthorized');
      // The genuine token is paced.
      const held = await refusal(paced, { token: second });
      expect(held.message).toBe('rate_limited');
      // An app connects at once, even with the pace spent.
      const app = await connect(paced, owner.accessToken);
      expect(app.socket.connected).toBe(true);
      app.close();
    } finally {
      first.close();
    }
  });
});

describe('admission and the per-IP budget of failed handshakes (decisions §6)', () => {
  let tight: TestService;
  beforeAll(async () => {
    const limits = ['general=3/60', 'auth=1000/60', 'login=1000/60', 'register=1000/60'].join(',');
    tight = await startTestService('embedded', { TUNNEL_HANDSHAKES_PER_SECOND: '1', RATE_LIMITS: limits });
  }, 60_000);
  afterAll(async () => {
    await tight?.stop();
  });

  test('hubs refused by admission spend nothing of their address\'s budget: the same hub gets in once the pace allows', async () => {
    const owner = await createUser(tight);
    const hub = await registerHub(tight, owner);
    const token = await deviceToken(tight, hub, owner);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const first = await connect(tight, token);
    first.close();
    // Twice the address's budget of failed handshakes, all refused by admission.
    const refused: unknown[] = [];
    for (let i = 0; i < 6; i++) refused.push((await refusal(tight, { token })).data);
    expect(refused).toEqual(Array(6).fill({ message: 'Too many connections at once, retry later', retryAfter: expect.any(Number) }));
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const again = await connect(tight, token);
    expect(again.socket.connected).toBe(true);
    again.close();
    // The budget is whole: three failed handshakes, and the fourth is refused by the address's
    // tier (tokens that claim to be access tokens, which admission lets through).
    const bad = forged({ alg: 'HS256', typ: 'JWT' }, { sub: owner.id, type: 'access' }, 'x');
    const failed: string[] = [];
    for (let i = 0; i < 4; i++) failed.push((await refusal(tight, { token: bad })).message);
    expect(failed).toEqual(['unauthorized', 'unauthorized', 'unauthorized', 'rate_limited']);
  });
});

describe('admission and an address past its limit (decisions §5, §6)', () => {
  let proxied: TestService;
  beforeAll(async () => {
    const limits = ['general=3/60', 'auth=1000/60', 'login=1000/60', 'register=1000/60'].join(',');
    proxied = await startTestService('embedded', { TUNNEL_HANDSHAKES_PER_SECOND: '5', RATE_LIMITS: limits, TRUST_PROXY: 'loopback' });
  }, 60_000);
  afterAll(async () => {
    await proxied?.stop();
  });

  /** The connect_error, or 'connected', of a handshake from `address` (behind the trusted proxy). */
  const handshakeFrom = async (address: string, token: string): Promise<{ message: string; data?: unknown }> => {
    const socket = io(`${proxied.baseUrl}/tunnel`, { auth: { token }, extraHeaders: { 'x-forwarded-for': address }, transports: ['websocket'], reconnection: false, forceNew: true, timeout: 5000 });
    try {
      return await new Promise((resolve) => {
        socket.once('connect', () => resolve({ message: 'connected' }));
        socket.once('connect_error', (error: Error & { data?: unknown }) => resolve({ message: error.message, data: error.data }));
      });
    } finally {
      socket.disconnect();
    }
  };

  /**
   * FINDING. Admission runs before the per-address limit of failed handshakes, and a token that
   * does not claim to be an access token is paced as a hub's. One address past its own limit
   * (refused "before any token check", decisions §5) still takes a place of the process's pace
   * with every handshake it sends: a single client sending junk at the pace keeps every hub of
   * the fleet out with `rate_limited`, however low its own limit. Admission's place is spent
   * on a handshake the address limit then refuses.
   */
  test('an address refused by its own limit does not spend the pace other hubs are admitted at', async () => {
    const owner = await createUser(proxied);
    const hub = await registerHub(proxied, owner);
    const token = await deviceToken(proxied, hub, owner);
    const junk = 'not.a.jwt';
    // The attacker's address spends its budget of failed handshakes (3) and is refused past it.
    const spent: string[] = [];
    for (let i = 0; i < 4; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      spent.push((await handshakeFrom('203.0.113.9', junk)).message);
    }
    expect(spent).toEqual(['unauthorized', 'unauthorized', 'unauthorized', 'rate_limited']);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    // Refused by its own limit, again and again.
    const limited: unknown[] = [];
    for (let i = 0; i < 5; i++) limited.push(await handshakeFrom('203.0.113.9', junk));
    // By the address's limit, not by admission.
    expect(limited).toEqual(Array(5).fill({ message: 'rate_limited', data: { retryAfter: expect.any(Number) } }));
    // A hub from another address, well within its own limit.
    expect(await handshakeFrom('198.51.100.7', token)).toEqual({ message: 'connected' });
  });
});
