import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { launchChromium } from '../support/browser';
import { GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';

/**
 * In a real browser (headless Chromium): the API reference page lists the operations and
 * tries one out; and a browser app on another origin reads the request-id and rate-limit
 * headers, and gets a readable 429 with Retry-After instead of an opaque CORS failure.
 */

let browser: Browser;
let service: TestService;
let appPage: Server;
let appOrigin: string;

beforeAll(async () => {
  // The browser app's own origin: a page served from another port.
  appPage = createServer((_req, res) => res.writeHead(200, { 'Content-Type': 'text/html' }).end('<!doctype html><title>app</title>'));
  await new Promise<void>((resolve) => appPage.listen(0, '127.0.0.1', () => resolve()));
  appOrigin = `http://127.0.0.1:${(appPage.address() as AddressInfo).port}`;
  service = await startTestService('embedded', { APP_ORIGIN: appOrigin, RATE_LIMITS: GENEROUS_RATE_LIMITS.replace(/general=[^,]+/, 'general=30/60') });
  browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await service?.stop();
  await new Promise((resolve) => appPage?.close(resolve));
});

test('the API reference page lists the operations, and a request can be tried from it', async () => {
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(`${service.baseUrl}/api/v1/docs`);
  await page.waitForSelector('.opblock', { timeout: 20_000 });
  const operations = await page.locator('.opblock-summary-path').allInnerTexts();
  for (const path of ['/auth/login', '/auth/sync-customer', '/devices/register', '/devices/auth/{uuid}/renew', '/devices/heartbeat/{uuid}', '/users/me']) {
    expect(operations.map((p) => p.replace(/\u200b/g, ''))).toContain(path);
  }

  // Try GET /health from the page.
  const health = page.locator('.opblock-get', { has: page.locator('.opblock-summary-path', { hasText: /^\/health$/ }) }).first();
  await health.locator('.opblock-summary').click();
  await health.locator('button.try-out__btn').click();
  await health.locator('button.execute').click();
  const body = health.locator('.responses-wrapper .live-responses-table .response-col_description pre').first();
  await body.waitFor({ timeout: 10_000 });
  expect(await body.innerText()).toContain('home-hub-cloud');
  expect(errors).toEqual([]);
  await page.close();
}, 60_000);

test('a browser app on another origin reads the exposed headers and a 429 with Retry-After', async () => {
  const page = await browser.newPage();
  await page.goto(appOrigin);
  const seen = await page.evaluate(async (api) => {
    const results: Array<{ status: number; requestId: string | null; limit: string | null; remaining: string | null; retryAfter: string | null; body: unknown }> = [];
    for (let i = 0; i < 32; i++) {
      // An Authorization header makes every one of these a preflighted request.
      const res = await fetch(`${api}/api/v1/users/me`, { headers: { Authorization: 'Bearer not-a-token' }, credentials: 'include' });
      results.push({
        status: res.status,
        requestId: res.headers.get('X-Request-Id'),
        limit: res.headers.get('X-RateLimit-Limit'),
        remaining: res.headers.get('X-RateLimit-Remaining'),
        retryAfter: res.headers.get('Retry-After'),
        body: await res.json(),
      });
      if (res.status === 429) break;
    }
    return results;
  }, service.baseUrl);
  const first = seen[0];
  expect(first?.status).toBe(401);
  expect(first?.requestId).toMatch(/^[0-9a-f-]{36}$/);
  expect(first?.limit).toBe('30');
  // Each request took exactly one from the budget: its preflight was not counted.
  const remaining = seen.slice(0, -1).map((r) => Number(r.remaining));
  expect(remaining).toEqual(remaining.map((_, i) => Number(first?.remaining) - i));
  expect(seen).toHaveLength(Number(first?.remaining) + 2);
  const limited = seen.at(-1);
  expect(limited?.status).toBe(429);
  expect(Number(limited?.retryAfter)).toBeGreaterThan(0);
  expect(limited?.remaining).toBe('0');
  expect(limited?.body).toMatchObject({ statusCode: 429, message: 'Rate limit exceeded', error: 'Too Many Requests' });
  await page.close();
}, 60_000);
