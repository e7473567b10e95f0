import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import type { Browser } from 'playwright-core';
import { HubClient } from '@home-hub-cloud/hub-client';
import { createAccount } from '../support/accounts';
import { launchChromium } from '../support/browser';
import { startTestService, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';

/**
 * The app client in a real browser (headless Chromium), bundled as an app would bundle it,
 * on a page of another origin, against the real service: log in, typed REST, one refresh
 * for concurrent requests, the tunnel with device:status as a callback and a hub's reply.
 */

const ROOT = resolve(__dirname, '../..');
let browser: Browser;
let service: TestService;
let smtp: TestSmtpServer;
let appPage: Server;
let appOrigin: string;

beforeAll(async () => {
  const bundle = await build({
    entryPoints: [join(ROOT, 'clients/app/src/index.ts')],
    bundle: true,
    format: 'iife',
    globalName: 'HomeHubCloud',
    platform: 'browser',
    target: 'es2022',
    tsconfig: join(ROOT, 'tsconfig.json'),
    write: false,
    logLevel: 'silent',
  });
  const script = bundle.outputFiles[0]?.text ?? '';
  appPage = createServer((req, res) => {
    if (req.url === '/app.js') res.writeHead(200, { 'Content-Type': 'text/javascript' }).end(script);
    else res.writeHead(200, { 'Content-Type': 'text/html' }).end('<!doctype html><title>app</title><script src="/app.js"></script>');
  });
  await new Promise<void>((done) => appPage.listen(0, '127.0.0.1', () => done()));
  appOrigin = `http://127.0.0.1:${(appPage.address() as AddressInfo).port}`;
  smtp = await startTestSmtpServer();
  service = await startTestService('embedded', { APP_ORIGIN: appOrigin, SMTP_URL: smtp.url });
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await service?.stop();
  await smtp?.stop();
  await new Promise((done) => appPage?.close(done));
});

test('in Chromium: log in, typed REST, one refresh for ten requests, the tunnel with status and replies', async () => {
  const account = await createAccount(service, smtp);
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(appOrigin);
  await page.waitForFunction(() => 'HomeHubCloud' in globalThis);

  // The page registers a hub and hands its device token to the hub (here, this process).
  const setup = await page.evaluate(
    async ({ api, email, password }) => {
      const { AppClient } = (globalThis as unknown as { HomeHubCloud: typeof import('@home-hub-cloud/app-client') }).HomeHubCloud;
      const cloud = new AppClient({ baseUrl: api });
      await cloud.login(email, password);
      const uuid = crypto.randomUUID();
      const registered = await cloud.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-BROWSER', name: 'Browser hub' } });
      const issued = await cloud.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } });
      (globalThis as unknown as { cloud: unknown }).cloud = cloud;
      return { status: registered.response.status, uuid, token: issued.data?.token ?? '' };
    },
    { api: service.baseUrl, email: account.email, password: account.password },
  );
  expect(setup.status).toBe(201);

  const hub = new HubClient({ baseUrl: service.baseUrl, uuid: setup.uuid, tokens: { load: () => setup.token, save: () => undefined } });
  hub.onMessage((message, reply) => void reply({ type: `${message.type}.done`, payload: message.payload }));
  try {
    const running = page.evaluate(
      async ({ uuid }) => {
        type Cloud = import('@home-hub-cloud/app-client').AppClient;
        const cloud = (globalThis as unknown as { cloud: Cloud }).cloud;
        const tunnel = cloud.tunnel();
        const statuses: boolean[] = [];
        const statusSeen = new Promise<void>((done) =>
          tunnel.onStatus((status) => {
            statuses.push(status.tunnelConnected);
            if (status.tunnelConnected) done();
          }),
        );
        await tunnel.connected();
        const subscribed = await tunnel.subscribe(uuid);
        (globalThis as unknown as { ready: boolean }).ready = true;
        await statusSeen;
        const reply = new Promise<unknown>((done) => tunnel.onMessage((message) => done(message)));
        const ack = await tunnel.send(uuid, 'light.set', { on: true }, 'b-1');
        const answer = await reply;
        // Ten requests at a moment past the access token's exp (the page's clock moved on): one refresh.
        const before = cloud.refreshes;
        const session = await cloud.session();
        const parts = (session?.accessToken ?? '').split('.');
        const claims = JSON.parse(atob((parts[1] ?? '').replace(/-/g, '+').replace(/_/g, '/'))) as { exp: number };
        const realNow = Date.now;
        Date.now = () => (claims.exp + 60) * 1000;
        const answers = await Promise.all(Array.from({ length: 10 }, () => cloud.api.GET('/users/me')));
        Date.now = realNow;
        tunnel.close();
        return { subscribed, ack, answer, statuses, statuses200: answers.map((a) => a.response.status), refreshes: cloud.refreshes - before };
      },
      { uuid: setup.uuid },
    );
    // The hub connects once the page is subscribed: the page sees it as device:status.
    await page.waitForFunction(() => (globalThis as unknown as { ready?: boolean }).ready === true);
    await hub.start();
    const result = await running;
    expect(result.subscribed).toMatchObject({ success: true, deviceUuid: setup.uuid });
    expect(result.ack).toEqual({ success: true, delivered: true });
    expect(result.answer).toMatchObject({ deviceUuid: setup.uuid, from: 'device', replyTo: 'b-1', type: 'light.set.done', payload: { on: true } });
    expect(result.statuses).toContain(true);
    expect(result.statuses200).toEqual(Array(10).fill(200));
    expect(result.refreshes).toBe(1);
    expect(errors).toEqual([]);
  } finally {
    hub.stop();
    await page.close();
  }
}, 60_000);
