import { createSecretKey } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { ACCESS_TOKEN_TTL_SECONDS, DEVICE_TOKEN_TTL_SECONDS, TOKEN_MESSAGES, createTokens } from '../../src/auth/tokens';
import { VerifiedTokens } from '../../src/auth/verified-tokens';

/**
 * Verified tokens are remembered by their exact text: a repeat costs no signature check, and
 * nothing but the very token that verified, before it expires, ever gets its claims back.
 */

const secrets = { jwtAccessSecret: 'a'.repeat(32), jwtRefreshSecret: 'r'.repeat(32), jwtDeviceSecret: 'd'.repeat(32) };
const T0 = Date.parse('2026-11-25T10:00:00.000Z');

afterEach(() => {
  jest.useRealTimers();
  jest.restoreAllMocks();
});

describe('VerifiedTokens', () => {
  test('keeps claims until the second of their expiry, then drops them', () => {
    let now = 1_000_000;
    const kept = new VerifiedTokens<{ exp: number; sub: string }>(10, () => now);
    kept.remember('t', { exp: 1_010, sub: 'u' });
    expect(kept.get('t')).toEqual({ exp: 1_010, sub: 'u' });
    now = 1_009_999;
    expect(kept.get('t')?.sub).toBe('u');
    now = 1_010_000; // exp is expired at its own second, as jsonwebtoken judges it
    expect(kept.get('t')).toBeUndefined();
    expect(kept.size).toBe(0);
  });

  test('keeps a 32-byte digest of each token, not its text: the token string is not held', () => {
    const kept = new VerifiedTokens<{ exp: number }>(10, () => 0);
    const token = jwt.sign({ sub: 'u', type: 'device', deviceUuid: 'd'.repeat(36), gen: 0 }, 'd'.repeat(32), { expiresIn: 60 });
    kept.remember(token, { exp: 100 });
    const keys = [...(kept as unknown as { entries: Map<string, unknown> }).entries.keys()];
    expect(keys).toHaveLength(1);
    expect(keys[0]).toHaveLength(32);
    expect(keys[0]).not.toBe(token);
    // Found again from the same text, written anew (not the same string object).
    expect(kept.get(token.split('.').join('.'))).toEqual({ exp: 100 });
  });

  test('a token that is not all printable ASCII is never remembered (one digest is one text)', () => {
    const kept = new VerifiedTokens<{ exp: number }>(10, () => 0);
    for (const token of ['t\u00e9', 'a b', 'x\ud800']) {
      expect(kept.remember(token, { exp: 100 })).toEqual({ exp: 100 });
      expect(kept.get(token)).toBeUndefined();
    }
    expect(kept.size).toBe(0);
  });

  test('is bounded: past its capacity the oldest entry gives way', () => {
    const kept = new VerifiedTokens<{ exp: number }>(3, () => 0);
    for (const t of ['a', 'b', 'c', 'd']) kept.remember(t, { exp: 100 });
    expect(kept.size).toBe(3);
    expect(kept.get('a')).toBeUndefined();
    expect(kept.get('d')).toEqual({ exp: 100 });
  });

  test('hands out frozen claims: one caller cannot change what the next one sees', () => {
    const kept = new VerifiedTokens<{ exp: number; sub: string }>(3, () => 0);
    const claims = kept.remember('t', { exp: 100, sub: 'u' });
    expect(Object.isFrozen(claims)).toBe(true);
    expect(Object.isFrozen(kept.get('t'))).toBe(true);
  });
});

describe('token verification with remembered tokens', () => {
  test('a repeated access token is checked once, and gets the same claims', () => {
    const tokens = createTokens(secrets);
    const token = tokens.signAccess({ sub: 'u-1', email: 'u@example.com', role: 'user' });
    const verify = jest.spyOn(jwt, 'verify');
    const first = tokens.verifyAccess(token);
    for (let i = 0; i < 5; i++) expect(tokens.verifyAccess(token)).toEqual(first);
    expect(verify).toHaveBeenCalledTimes(1);
  });

  test('a token differing from a remembered one in a single character is fully checked, and refused', () => {
    const tokens = createTokens(secrets);
    const token = tokens.signAccess({ sub: 'u-1', email: 'u@example.com', role: 'user' });
    tokens.verifyAccess(token);
    const last = token.at(-2) === 'A' ? 'B' : 'A';
    const altered = `${token.slice(0, -2)}${last}${token.slice(-1)}`;
    expect(() => tokens.verifyAccess(altered)).toThrow(TOKEN_MESSAGES.invalid);
    // Claims changed, signature kept: refused too.
    const [header, , signature] = token.split('.');
    const forgedBody = Buffer.from(JSON.stringify({ sub: 'admin-1', email: 'a@example.com', role: 'admin', type: 'access', iat: 1, exp: 9_999_999_999 })).toString('base64url');
    expect(() => tokens.verifyAccess(`${header}.${forgedBody}.${signature}`)).toThrow(TOKEN_MESSAGES.invalid);
  });

  test('a remembered access token expires on time, with the expiry message', () => {
    jest.useFakeTimers({ now: T0 });
    const tokens = createTokens(secrets);
    const token = tokens.signAccess({ sub: 'u-1', email: 'u@example.com', role: 'user' });
    expect(tokens.verifyAccess(token).sub).toBe('u-1');
    jest.setSystemTime(T0 + (ACCESS_TOKEN_TTL_SECONDS - 1) * 1000);
    expect(tokens.verifyAccess(token).sub).toBe('u-1');
    jest.setSystemTime(T0 + ACCESS_TOKEN_TTL_SECONDS * 1000);
    expect(() => tokens.verifyAccess(token)).toThrow(TOKEN_MESSAGES.expired);
  });

  test('device tokens are remembered and expire the same way; a device token is never taken as an access token', () => {
    jest.useFakeTimers({ now: T0 });
    const tokens = createTokens(secrets);
    const token = tokens.signDevice({ sub: 'd-1', deviceUuid: '0b7a2c7e-2f43-4a8e-9d8a-6a1f7f1c2b3d', gen: 2 });
    const verify = jest.spyOn(jwt, 'verify');
    expect(tokens.verifyDevice(token).gen).toBe(2);
    expect(tokens.verifyDevice(token).gen).toBe(2);
    expect(verify).toHaveBeenCalledTimes(1);
    expect(() => tokens.verifyAccess(token)).toThrow(TOKEN_MESSAGES.invalid);
    jest.setSystemTime(T0 + DEVICE_TOKEN_TTL_SECONDS * 1000);
    expect(() => tokens.verifyDevice(token)).toThrow(TOKEN_MESSAGES.expired);
  });

  test('a device token\'s remembered claims are what is read of them; `sub` is still required to verify', () => {
    jest.useFakeTimers({ now: T0 });
    const tokens = createTokens(secrets);
    const deviceUuid = '0b7a2c7e-2f43-4a8e-9d8a-6a1f7f1c2b3d';
    const token = tokens.signDevice({ sub: 'd-1', deviceUuid, gen: 2 });
    expect(tokens.verifyDevice(token)).toEqual({ deviceUuid, type: 'device', gen: 2, exp: T0 / 1000 + DEVICE_TOKEN_TTL_SECONDS });
    // The same claims again, from memory.
    expect(tokens.verifyDevice(token)).toBe(tokens.verifyDevice(token));
    const key = createSecretKey(Buffer.from(secrets.jwtDeviceSecret, 'utf8'));
    const withoutSub = jwt.sign({ deviceUuid, gen: 2, type: 'device' }, key, { algorithm: 'HS256', expiresIn: 60 });
    expect(() => tokens.verifyDevice(withoutSub)).toThrow(TOKEN_MESSAGES.invalid);
  });

  test('refresh tokens are not remembered: each use is checked in full', () => {
    const tokens = createTokens(secrets);
    const { token } = tokens.signRefresh({ sub: 'u-1', fam: 'f-1' });
    const verify = jest.spyOn(jwt, 'verify');
    tokens.verifyRefresh(token);
    tokens.verifyRefresh(token);
    expect(verify).toHaveBeenCalledTimes(2);
  });
});
