import { randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import type { MessageAck, MessageFromDevice, MessageToDevice, SubscribeAck } from '../../src/tunnel/events';
import { api, createUser, CRM_KEY, MODES, shiftedClock, startTestService, type Mode, type TestService } from '../support/harness';
import { TEST_SECRETS } from '../support/server';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { resetTokenIn, type LoginBody } from '../support/accounts';
import { connect, refusal, request, type Probe } from '../support/tunnel';

/**
 * Operations (decisions §8): structured JSON logs in which Authorization headers,
 * passwords, tokens, reset links and API keys are redacted. A full run over real HTTP and
 * the real tunnel, at the most verbose log level, remembers every secret it used; the
 * service's log must then contain none of them.
 */

const APP_ORIGIN = 'https://app.redaction.test';
const RESET_LINK = /^(https:\/\/app\.redaction\.test\/reset-password\?token=\S+)$/m;

/** Every secret the run used, by name: long, random values no log line can hold by chance. */
class Secrets {
  private readonly byName = new Map<string, string>();

  keep(name: string, value: string): string {
    if (value.length < 14) throw new Error(`secret ${name} is too short to be searched for safely: ${value.length} characters`);
    const known = this.byName.get(name);
    if (known !== undefined && known !== value) throw new Error(`secret name ${name} used twice`);
    this.byName.set(name, value);
    return value;
  }

  /** A JWT, and its signature on its own: a log line holding either leaks the token. */
  keepJwt(name: string, token: string): string {
    this.keep(name, token);
    const signature = token.split('.')[2] ?? '';
    this.keep(`${name} (signature)`, signature);
    return token;
  }

  entries(): Array<[string, string]> {
    return [...this.byName.entries()];
  }
}

const unique = (label: string): string => `${label}-${randomUUID()}`;

/** A JWT the service must refuse: signed with `secret`, whatever the claims. */
function forge(claims: Record<string, unknown>, secret: string): string {
  return jwt.sign(claims, secret, { algorithm: 'HS256' });
}

interface LogLine {
  readonly level?: number;
  readonly msg?: string;
  readonly method?: string;
  readonly route?: string;
  readonly status?: number;
}

function parseLog(text: string): LogLine[] {
  return text
    .split('\n')
    .filter((line) => line.trim().length > 0)
    .map((line) => JSON.parse(line) as LogLine);
}

describe.each<Mode>(MODES)('log redaction over a full run (%s mode)', (mode) => {
  const clock = shiftedClock();
  let smtp: TestSmtpServer;
  let service: TestService;
  let stopped = false;
  const sockets: Probe[] = [];

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { LOG_LEVEL: 'trace', SMTP_URL: smtp.url, APP_ORIGIN }, { clock });
  }, 60_000);

  afterAll(async () => {
    for (const socket of sockets.splice(0)) socket.close();
    if (!stopped) await service?.stop();
    await smtp?.stop();
  });

  test('the log of a full run holds none of the secrets it used', async () => {
    const secrets = new Secrets();
    secrets.keep('JWT_ACCESS_SECRET', TEST_SECRETS.JWT_ACCESS_SECRET);
    secrets.keep('JWT_REFRESH_SECRET', TEST_SECRETS.JWT_REFRESH_SECRET);
    secrets.keep('JWT_DEVICE_SECRET', TEST_SECRETS.JWT_DEVICE_SECRET);
    for (const [i, key] of TEST_SECRETS.INTERNAL_API_KEYS.split(',').entries()) secrets.keep(`INTERNAL_API_KEYS[${i}]`, key);
    secrets.keep('CRM_KEY', CRM_KEY);
    const wrongApiKey = secrets.keep('wrong internal API key', unique('wrong-internal-api-key'));

    // --- CRM: a wrong key, then the real one ------------------------------------------
    const syncId = 900_000 + Math.floor(Math.random() * 90_000);
    const email = `redaction.${syncId}@example.com`;
    const customer = { id: syncId, first_name: 'Red', last_name: 'Action', email, active: true };
    const refused = await api(service, 'POST', '/auth/sync-customer', { headers: { 'X-Internal-Api-Key': wrongApiKey }, body: customer });
    expect(refused.status).toBe(401);
    const synced = await api(service, 'POST', '/auth/sync-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: customer });
    expect(synced.status).toBe(201);
    const userId = (synced.body as { user: { id: string } }).user.id;

    // --- Password reset: request, mail, token and link, confirm -----------------------
    const resetOnce = async (label: string, password: string): Promise<string> => {
      const seen = smtp.mails().filter((mail) => mail.to.includes(email)).length;
      expect((await api(service, 'POST', '/auth/password-reset/request', { body: { email } })).status).toBe(202);
      const mail = await smtp.waitForMail(email, { skip: seen });
      const token = secrets.keep(`${label} reset token`, resetTokenIn(mail.text));
      secrets.keep(`${label} reset token (secret part)`, token.split('.')[1] ?? '');
      const link = RESET_LINK.exec(mail.text)?.[1];
      expect(link).toBe(`${APP_ORIGIN}/reset-password?token=${token}`);
      secrets.keep(`${label} reset link`, link ?? '');
      const confirmed = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password } });
      expect(confirmed.status).toBe(200);
      return token;
    };
    const firstPassword = secrets.keep('first password', unique('first-password'));
    const spentToken = await resetOnce('first', firstPassword);
    const spent = await api(service, 'POST', '/auth/password-reset/confirm', {
      body: { token: spentToken, password: secrets.keep('password sent with a spent token', unique('spent-token-password')) },
    });
    expect(spent.status).toBe(400);

    const login = async (label: string, password: string, expected = 201): Promise<LoginBody> => {
      const res = await api(service, 'POST', '/auth/login', { body: { email, password } });
      expect(res.status).toBe(expected);
      if (expected !== 201) return res.body as LoginBody;
      const body = res.body as LoginBody;
      secrets.keepJwt(`${label} access token`, body.accessToken);
      secrets.keepJwt(`${label} refresh token`, body.refreshToken);
      return body;
    };
    const firstSession = await login('first login', firstPassword);
    expect(firstSession.user.id).toBe(userId);

    const newPassword = secrets.keep('new password', unique('new-password'));
    await resetOnce('second', newPassword);
    await login('old password', firstPassword, 401);

    // --- Login: good, wrong password, unknown address ---------------------------------
    const session = await login('second login', newPassword);
    await login('wrong password', secrets.keep('wrong password', unique('wrong-password')), 401);
    const unknownLogin = await api(service, 'POST', '/auth/login', {
      body: { email: `nobody.${randomUUID()}@example.com`, password: secrets.keep('unknown user password', unique('unknown-user-password')) },
    });
    expect(unknownLogin.status).toBe(401);

    // --- Refresh: rotate, then reuse the old token -------------------------------------
    const rotated = await api(service, 'POST', '/auth/refresh', { body: { refreshToken: session.refreshToken } });
    expect(rotated.status).toBe(201);
    const rotatedPair = rotated.body as { accessToken: string; refreshToken: string };
    secrets.keepJwt('rotated access token', rotatedPair.accessToken);
    secrets.keepJwt('rotated refresh token', rotatedPair.refreshToken);
    // Past the race window, so the old token's return is reuse (decisions §3).
    clock.advance(5_001);
    expect((await api(service, 'POST', '/auth/refresh', { body: { refreshToken: session.refreshToken } })).status).toBe(401);
    expect((await api(service, 'POST', '/auth/refresh', { body: { refreshToken: rotatedPair.refreshToken } })).status).toBe(401);

    // --- Logout -----------------------------------------------------------------------
    const leaving = await login('logout login', newPassword);
    expect((await api(service, 'GET', '/users/me', { token: leaving.accessToken })).status).toBe(200);
    expect((await api(service, 'POST', '/auth/logout', { token: leaving.accessToken })).status).toBe(200);
    expect((await api(service, 'POST', '/auth/refresh', { body: { refreshToken: leaving.refreshToken } })).status).toBe(401);

    // --- Devices: register, device auth, heartbeats, share -----------------------------
    const owner = await login('device owner login', newPassword);
    const registered = await api(service, 'POST', '/devices/register', {
      token: owner.accessToken,
      body: { uuid: randomUUID(), deviceId: `HUB-${randomUUID().slice(0, 8)}`, name: 'Hub' },
    });
    expect(registered.status).toBe(201);
    const hub = registered.body as { id: string; uuid: string };
    const deviceAuth = async (label: string): Promise<string> => {
      const res = await api(service, 'POST', `/devices/auth/${hub.uuid}`, { token: owner.accessToken });
      expect(res.status).toBe(201);
      return secrets.keepJwt(label, (res.body as { token: string }).token);
    };
    const firstDeviceToken = await deviceAuth('first device token');
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: firstDeviceToken })).status).toBe(200);
    const deviceToken = await deviceAuth('second device token');
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: deviceToken })).status).toBe(200);
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: deviceToken, body: { ipAddress: '10.0.0.7' } })).status).toBe(200);
    // The older token was revoked by the newer one.
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: firstDeviceToken })).status).toBe(401);

    const guest = await createUser(service);
    secrets.keepJwt('guest access token', guest.accessToken);
    expect((await api(service, 'POST', `/devices/${hub.id}/link`, { token: owner.accessToken, body: { email: guest.email, role: 'viewer' } })).status).toBe(
      201,
    );
    expect((await api(service, 'GET', '/devices', { token: guest.accessToken })).status).toBe(200);

    // --- The tunnel: an app, a guest and the device exchange messages ------------------
    const open = async (token: string): Promise<Probe> => {
      const socket = await connect(service, token);
      sockets.push(socket);
      return socket;
    };
    const app = await open(owner.accessToken);
    const guestApp = await open(guest.accessToken);
    for (const p of [app, guestApp]) {
      expect(await request<SubscribeAck>(p, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true, deviceUuid: hub.uuid });
    }
    const device = await open(deviceToken);
    const payloadSecret = unique('message-payload');
    expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, id: 'm-1', type: 'light.set', payload: { on: true } })).toEqual({
      success: true,
      delivered: true,
    });
    expect(await device.next<MessageToDevice>('tunnel:message')).toMatchObject({ id: 'm-1', from: { userId }, type: 'light.set' });
    expect(await request<MessageAck>(device, 'tunnel:message', { replyTo: 'm-1', type: 'ok', payload: { echo: payloadSecret } })).toEqual({
      success: true,
      delivered: true,
    });
    for (const p of [app, guestApp]) {
      expect(await p.next<MessageFromDevice>('tunnel:message')).toMatchObject({ from: 'device', replyTo: 'm-1', payload: { echo: payloadSecret } });
    }
    // A viewer may not control the device: a tunnel:error, not a log of its token.
    guestApp.socket.emit('tunnel:message', { deviceUuid: hub.uuid, type: 'light.set', payload: {} });
    expect(await guestApp.next<{ code: string }>('tunnel:error')).toMatchObject({ code: 'FORBIDDEN' });

    // --- Bad, expired and wrong-kind tokens: HTTP and tunnel handshakes ----------------
    const now = Math.floor(Date.now() / 1000);
    const expiredAccess = secrets.keepJwt(
      'expired access token',
      forge({ sub: userId, email, role: 'user', type: 'access', fam: randomUUID(), iat: now - 3600, exp: now - 60 }, TEST_SECRETS.JWT_ACCESS_SECRET),
    );
    const expiredDevice = secrets.keepJwt(
      'expired device token',
      forge({ sub: hub.id, deviceUuid: hub.uuid, type: 'device', gen: 2, iat: now - 90_000, exp: now - 60 }, TEST_SECRETS.JWT_DEVICE_SECRET),
    );
    const foreignAccess = secrets.keepJwt(
      'access token signed with a foreign key',
      forge({ sub: userId, email, role: 'admin', type: 'access', iat: now, exp: now + 600 }, unique('foreign-signing-key')),
    );
    const garbageBearer = secrets.keep('garbage bearer token', unique('garbage-bearer-token'));
    const basicCredentials = secrets.keep('basic credentials', Buffer.from(`${email}:${newPassword}`).toString('base64'));
    const rejectedHeaders: Array<[string, string]> = [
      ['expired access token', `Bearer ${expiredAccess}`],
      ['foreign access token', `Bearer ${foreignAccess}`],
      ['garbage bearer token', `Bearer ${garbageBearer}`],
      ['device token as user token', `Bearer ${deviceToken}`],
      ['refresh token as access token', `Bearer ${rotatedPair.refreshToken}`],
      ['basic credentials', `Basic ${basicCredentials}`],
    ];
    for (const [what, authorization] of rejectedHeaders) {
      const res = await api(service, 'GET', '/users/me', { headers: { Authorization: authorization } });
      expect({ what, status: res.status }).toEqual({ what, status: 401 });
    }
    for (const [what, token] of [
      ['expired device token', expiredDevice],
      ['revoked device token', firstDeviceToken],
      ['user token as device token', owner.accessToken],
    ] as const) {
      const res = await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token });
      expect({ what, status: res.status }).toEqual({ what, status: 401 });
    }
    for (const token of [expiredAccess, expiredDevice, firstDeviceToken, garbageBearer, foreignAccess]) {
      expect((await refusal(service, { token })).message).toBe('unauthorized');
    }

    // --- Validation errors and malformed bodies that carry a password ------------------
    const badLogin = await api(service, 'POST', '/auth/login', {
      body: { email: 'not-an-email', password: secrets.keep('password in an invalid login', unique('invalid-login-password')) },
    });
    expect(badLogin.status).toBe(400);
    const tooLong = secrets.keep('too long password', `${unique('too-long-password')}-${'p'.repeat(100)}`);
    const badConfirm = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token: spentToken, password: tooLong } });
    expect(badConfirm.status).toBe(400);
    expect((badConfirm.body as { details: Array<{ field: string }> }).details).toEqual([{ field: 'password', message: expect.any(String) }]);
    const extraField = await api(service, 'POST', '/auth/login', {
      body: { email, password: newPassword, apiKey: secrets.keep('api key in a login body', unique('stray-api-key')) },
    });
    expect([201, 400]).toContain(extraField.status);
    if (extraField.status === 201) {
      secrets.keepJwt('extra field login access token', (extraField.body as LoginBody).accessToken);
      secrets.keepJwt('extra field login refresh token', (extraField.body as LoginBody).refreshToken);
    }
    const malformedPassword = secrets.keep('password in malformed JSON', unique('malformed-json-password'));
    const malformed = await fetch(`${service.baseUrl}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: `{"email": "${email}", "password": "${malformedPassword}"`,
    });
    expect(malformed.status).toBe(400);
    await malformed.text();

    // --- Settle, stop, and read the whole log ------------------------------------------
    await new Promise((resolve) => setTimeout(resolve, 300));
    for (const socket of sockets.splice(0)) socket.close();
    await service.stop();
    stopped = true;

    const log = service.logs();
    expect(log.length).toBeGreaterThan(0);
    const lines = parseLog(log);
    const requestLines = lines.filter((line) => line.msg === 'request');
    // Every request line names the full route template, errors included.
    const sawRequest = (method: string, route: string, status: number): boolean =>
      requestLines.some((line) => line.method === method && line.route === route && line.status === status);
    const expected: Array<[string, string, number]> = [
      ['POST', '/api/v1/auth/sync-customer', 401],
      ['POST', '/api/v1/auth/sync-customer', 201],
      ['POST', '/api/v1/auth/password-reset/request', 202],
      ['POST', '/api/v1/auth/password-reset/confirm', 200],
      ['POST', '/api/v1/auth/password-reset/confirm', 400],
      ['POST', '/api/v1/auth/login', 201],
      ['POST', '/api/v1/auth/login', 401],
      ['POST', '/api/v1/auth/login', 400],
      ['POST', '/api/v1/auth/refresh', 201],
      ['POST', '/api/v1/auth/refresh', 401],
      ['POST', '/api/v1/auth/logout', 200],
      ['GET', '/api/v1/users/me', 401],
      ['POST', '/api/v1/devices/register', 201],
      ['POST', '/api/v1/devices/auth/:uuid', 201],
      ['POST', '/api/v1/devices/heartbeat/:uuid', 200],
      ['POST', '/api/v1/devices/heartbeat/:uuid', 401],
      ['POST', '/api/v1/devices/:id/link', 201],
    ];
    const missing = expected.filter(([method, route, status]) => !sawRequest(method, route, status)).map((e) => e.join(' '));
    expect(missing).toEqual([]);
    expect(lines.some((line) => line.msg === 'password reset e-mail sent')).toBe(true);

    const leaked = secrets.entries().filter(([, value]) => log.includes(value)).map(([name]) => name);
    expect({ checked: secrets.entries().length, leaked }).toEqual({ checked: secrets.entries().length, leaked: [] });
    expect(secrets.entries().length).toBeGreaterThan(40);
    // No password hash either.
    expect(log.includes('$argon2')).toBe(false);
  }, 120_000);
});
