import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TunnelError } from '../../src/tunnel/events';
import { SNAPSHOT_FILE_NAME } from '../../src/runtime/snapshot';
import { api, CRM_KEY, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { createAccount, login, requestResetToken, type Account, type LoginBody } from '../support/accounts';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { connect, type Probe } from '../support/tunnel';
import { startTwoProcesses, type StartedProcesses } from '../support/two-processes';

/**
 * Access tokens ended before they expire (decisions §1, §3; issue 25, points 1 and 9, and the
 * decisions of 2026-11-25): what a process refuses follows from the log alone. A restart
 * without a usable snapshot, a new process, the other process of a pair: each refuses the
 * tokens issued before a deactivation (even after a reactivation), before a password reset,
 * and of a family whose reuse was detected, from the moment the write that ended them answered.
 */

const REVOKED = { statusCode: 401, message: 'Token has been revoked', error: 'Unauthorized' };

async function sync(service: TestService, user: { syncId: number; email: string }, active: boolean): Promise<number> {
  const res = await api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: user.syncId, first_name: 'Ada', last_name: 'Lovelace', email: user.email, active },
  });
  return res.status;
}

/** The sync id of an account made by createAccount (read back from the user's stream). */
async function syncIdOf(service: TestService, userId: string): Promise<number> {
  for await (const event of service.eventStore.readStream(`user-${userId}`)) {
    const data = event.data as { syncId?: unknown };
    if (event.type === 'UserSynced' && typeof data.syncId === 'number') return data.syncId;
  }
  throw new Error('no UserSynced');
}

/** What a process answers to an access token: on HTTP (two routes) and at the tunnel's handshake. */
async function verdict(service: TestService, token: string): Promise<{ me: unknown; devices: number; tunnel: string }> {
  const me = await api(service, 'GET', '/users/me', { token });
  const devices = await api(service, 'GET', '/devices', { token });
  let tunnel = 'connected';
  try {
    const p = await connect(service, token);
    p.close();
  } catch (error) {
    tunnel = error instanceof Error ? error.message : String(error);
  }
  return { me: me.status === 200 ? 200 : me.body, devices: devices.status, tunnel };
}

const REFUSED = { me: REVOKED, devices: 401, tunnel: 'unauthorized' };
const ACCEPTED = { me: 200, devices: 200, tunnel: 'connected' };

interface Cut {
  readonly account: Account & { readonly syncId: number };
  /** Logged in before the deactivation. */
  readonly before: LoginBody;
  /** Logged in after the reactivation. */
  readonly after: LoginBody;
}

/** A user logged in, deactivated, reactivated and logged in again: `before` must stay refused. */
async function deactivatedAndBack(service: TestService, smtp: TestSmtpServer): Promise<Cut> {
  const made = await createAccount(service, smtp);
  const account = { ...made, syncId: await syncIdOf(service, made.id) };
  const before = await login(service, account.email, account.password);
  expect(await sync(service, account, false)).toBe(200);
  expect(await sync(service, account, true)).toBe(200);
  const after = await login(service, account.email, account.password);
  return { account, before, after };
}

describe('embedded: a restart without a usable snapshot forgets no revocation', () => {
  jest.setTimeout(120_000);
  let smtp: TestSmtpServer;
  const dir = mkdtempSync(join(tmpdir(), 'hhc-revocations-'));
  let service: TestService | undefined;

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
  });
  afterAll(async () => {
    await service?.stop();
    await smtp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const start = async (env: Record<string, string> = {}): Promise<TestService> =>
    (service = await startTestService('embedded', { DATA_DIR: dir, SMTP_URL: smtp.url, ...env }));
  const restart = async (env: Record<string, string>, snapshot: 'delete' | 'keep'): Promise<TestService> => {
    await service?.stop();
    service = undefined;
    if (snapshot === 'delete') rmSync(join(dir, SNAPSHOT_FILE_NAME), { force: true });
    return start(env);
  };

  it('deactivated then reactivated: the earlier tokens stay refused after a start with no snapshot, then with a stale one', async () => {
    const first = await start();
    const cut = await deactivatedAndBack(first, smtp);
    const reset = await createAccount(first, smtp);
    const beforeReset = await login(first, reset.email, reset.password);
    expect(await verdict(first, beforeReset.accessToken)).toEqual(ACCEPTED);
    const { token } = await requestResetToken(first, smtp, reset.email);
    expect((await api(first, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'another-Secret-1' } })).status).toBe(200);
    expect(await verdict(first, cut.before.accessToken)).toEqual(REFUSED);
    expect(await verdict(first, beforeReset.accessToken)).toEqual(REFUSED);

    // No snapshot at all.
    const second = await restart({}, 'delete');
    expect(second.logs()).toContain('start snapshot: none; replaying the whole log');
    expect(await verdict(second, cut.before.accessToken)).toEqual(REFUSED);
    expect(await verdict(second, beforeReset.accessToken)).toEqual(REFUSED);
    expect(await verdict(second, cut.after.accessToken)).toEqual(ACCEPTED);

    // A stale one (another build), and the snapshot that start writes carries nothing lost forward.
    const third = await restart({ APP_VERSION: 'another-build' }, 'keep');
    expect(third.logs()).toContain('start snapshot: stale; replaying the whole log');
    expect(await verdict(third, cut.before.accessToken)).toEqual(REFUSED);
    const fourth = await restart({ APP_VERSION: 'another-build' }, 'keep');
    expect(fourth.logs()).toContain('start snapshot: loaded');
    expect(await verdict(fourth, cut.before.accessToken)).toEqual(REFUSED);
    expect(await verdict(fourth, beforeReset.accessToken)).toEqual(REFUSED);
    expect(await verdict(fourth, cut.after.accessToken)).toEqual(ACCEPTED);
  });
});

describe('distributed: every process, new or running, refuses what was revoked', () => {
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

  it('a process started after a deactivation and a reactivation refuses the earlier tokens', async () => {
    const cut = await deactivatedAndBack(pair.a, smtp);
    const late = await pair.a.startAnother();
    try {
      expect(await verdict(late, cut.before.accessToken)).toEqual(REFUSED);
      expect(await verdict(late, cut.after.accessToken)).toEqual(ACCEPTED);
    } finally {
      await late.stop();
    }
  });
});

describe.each<Mode>(MODES)('a password reset and a detected reuse end access tokens at once (%s mode)', (mode) => {
  jest.setTimeout(120_000);
  let smtp: TestSmtpServer;
  let service: TestService;
  const sockets: Probe[] = [];

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url });
  }, 60_000);
  afterEach(() => {
    for (const p of sockets.splice(0)) p.close();
  });
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  it('a password reset: every earlier access token is refused and its sockets get ACCESS_REVOKED; a new login works', async () => {
    const account = await createAccount(service, smtp);
    const [one, two] = [await login(service, account.email, account.password), await login(service, account.email, account.password)];
    const live = await connect(service, one.accessToken);
    sockets.push(live);
    const { token } = await requestResetToken(service, smtp, account.email);
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'brand-new-Secret-9' } })).status).toBe(200);

    expect(await verdict(service, one.accessToken)).toEqual(REFUSED);
    expect(await verdict(service, two.accessToken)).toEqual(REFUSED);
    const error = await live.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED');
    expect(error.code).toBe('ACCESS_REVOKED');
    await live.next('disconnect');
    const fresh = await login(service, account.email, 'brand-new-Secret-9');
    expect(await verdict(service, fresh.accessToken)).toEqual(ACCEPTED);
  });

  it("a detected reuse: that family's access tokens are refused and their sockets closed; the user's other family is untouched", async () => {
    const account = await createAccount(service, smtp);
    const stolen = await login(service, account.email, account.password);
    const other = await login(service, account.email, account.password);
    const live = await connect(service, stolen.accessToken);
    const untouched = await connect(service, other.accessToken);
    sockets.push(live, untouched);
    const rotated = await api(service, 'POST', '/auth/refresh', { body: { refreshToken: stolen.refreshToken } });
    expect(rotated.status).toBe(201);
    const rotatedAccess = (rotated.body as { accessToken: string }).accessToken;
    // Past the window in which a second presentation is a lost race (decisions §3): reuse.
    await new Promise((resolve) => setTimeout(resolve, 5200));
    const reuse = await api(service, 'POST', '/auth/refresh', { body: { refreshToken: stolen.refreshToken } });
    expect(reuse.status).toBe(401);

    expect(await verdict(service, stolen.accessToken)).toEqual(REFUSED);
    expect(await verdict(service, rotatedAccess)).toEqual(REFUSED);
    expect((await live.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).code).toBe('ACCESS_REVOKED');
    expect(await verdict(service, other.accessToken)).toEqual(ACCEPTED);
    expect(untouched.socket.connected).toBe(true);
    expect(untouched.all<TunnelError>('tunnel:error')).toEqual([]);
  });
});
