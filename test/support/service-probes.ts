import { createTokens } from '../../src/auth/tokens';
import { TEST_SECRETS, type ServerProcess } from './server';

/** What tests of service processes (test/support/server.ts) ask them: tokens they accept, readiness, and a poll. */

/** Signs tokens the processes started with TEST_SECRETS accept. */
export const testTokens = createTokens({
  jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
  jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
  jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
});

export interface Readiness {
  readonly status: number;
  readonly body: { status: string; checks: Record<string, { status: string }> };
}

/** `GET /health/ready` of the process. */
export async function ready(service: Pick<ServerProcess, 'baseUrl'>): Promise<Readiness> {
  const res = await fetch(`${service.baseUrl}/api/v1/health/ready`, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: (await res.json()) as Readiness['body'] };
}

/** Polls until `until` holds; the bound only ends a run that would otherwise hang. */
export async function eventually<T>(probe: () => Promise<T>, until: (value: T) => boolean, what: string, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (until(value)) return value;
    if (Date.now() > deadline) throw new Error(`never ${what}; last: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
