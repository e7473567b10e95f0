import { createTokens } from '../../src/auth/tokens';
import { UnauthorizedError } from '../../src/domain/errors';
import { TEST_SECRETS } from '../support/server';

/**
 * Verified tokens are remembered under the SHA-256 digest of their text (src/auth/verified-tokens.ts).
 * Once a token is remembered, no other text is taken for it: every variant of it is checked in
 * full and refused, and a token of one kind is never taken as the other.
 */

const tokens = createTokens({
  jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
  jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
  jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
});

function refused(verify: () => unknown): boolean {
  try {
    verify();
    return false;
  } catch (error) {
    if (error instanceof UnauthorizedError) return true;
    throw error;
  }
}

/** Texts that differ from `token` but a careless key could confuse with it. */
function variants(token: string): string[] {
  const out = new Set<string>();
  for (let i = 0; i < token.length; i++) {
    const c = token[i] as string;
    const flipped = c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase();
    if (flipped !== c) out.add(token.slice(0, i) + flipped + token.slice(i + 1));
    // The same low byte in a wider character: one UTF-16 unit apart, the same 'latin1' byte.
    out.add(token.slice(0, i) + String.fromCharCode(c.charCodeAt(0) + 0x100) + token.slice(i + 1));
  }
  for (const extra of [' ', '\n', '\t', '\0', '=', '.', 'A', '\u00a0', '\u200b', '\ufeff']) {
    out.add(token + extra);
    out.add(extra + token);
  }
  out.add(`${token}==`);
  out.add(token.slice(0, -1));
  out.add(token.normalize('NFKC').replace(/-/g, '\u2011'));
  out.add(Buffer.from(token, 'utf8').toString('latin1'));
  out.delete(token);
  return [...out];
}

test('no variant of a remembered access token is taken for it', () => {
  const token = tokens.signAccess({ sub: 'user-1', email: 'user.1@example.com', role: 'admin' });
  expect(tokens.verifyAccess(token).sub).toBe('user-1');
  expect(tokens.verifyAccess(token).sub).toBe('user-1');
  const all = variants(token);
  expect(all.length).toBeGreaterThan(400);
  expect(all.filter((v) => !refused(() => tokens.verifyAccess(v)))).toEqual([]);
});

test('no variant of a remembered device token is taken for it, and neither kind is taken for the other once remembered', () => {
  const device = tokens.signDevice({ sub: 'dev-1', deviceUuid: '00000000-0000-4000-8000-000000000001', gen: 3 });
  const access = tokens.signAccess({ sub: 'user-2', email: 'user.2@example.com', role: 'user' });
  expect(tokens.verifyDevice(device).gen).toBe(3);
  expect(tokens.verifyAccess(access).sub).toBe('user-2');
  expect(refused(() => tokens.verifyAccess(device))).toBe(true);
  expect(refused(() => tokens.verifyDevice(access))).toBe(true);
  expect(variants(device).filter((v) => !refused(() => tokens.verifyDevice(v)))).toEqual([]);
});

test('a token of the largest size a handshake takes costs no more than a full check', () => {
  const big = `${'A'.repeat(8000)}.${'B'.repeat(100)}.${'C'.repeat(43)}`;
  const started = process.hrtime.bigint();
  for (let i = 0; i < 200; i++) expect(refused(() => tokens.verifyAccess(big))).toBe(true);
  // 200 checks of 8 KB, hashing included: well below 5 ms each, even on a busy machine.
  expect(Number(process.hrtime.bigint() - started) / 1e6 / 200).toBeLessThan(5);
});
