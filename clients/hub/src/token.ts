/** What a hub needs to know of its device token: when it was issued and when it expires (seconds). */
export interface TokenTimes {
  readonly iat: number;
  readonly exp: number;
}

function base64UrlDecode(text: string): string {
  const padded = text.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (text.length % 4)) % 4);
  if (typeof Buffer !== 'undefined') return Buffer.from(padded, 'base64').toString('utf8');
  return atob(padded);
}

/** Reads `iat` and `exp` of a JWT without verifying it (the service verifies; the client only schedules). */
export function tokenTimes(token: string): TokenTimes | null {
  const part = token.split('.')[1];
  if (part === undefined) return null;
  try {
    const claims = JSON.parse(base64UrlDecode(part)) as { iat?: unknown; exp?: unknown };
    if (typeof claims.exp !== 'number') return null;
    const iat = typeof claims.iat === 'number' ? claims.iat : claims.exp - 86_400;
    return { iat, exp: claims.exp };
  } catch {
    return null;
  }
}
