/** An app's session: the token pair of a login, renewed by refresh. */
export interface Session {
  readonly accessToken: string;
  readonly refreshToken: string;
}

/** Where the app keeps its session (memory, localStorage, the keychain...). */
export interface SessionStore {
  load(): Promise<Session | null> | Session | null;
  save(session: Session | null): Promise<void> | void;
}

export function memorySessionStore(initial: Session | null = null): SessionStore & { current: Session | null } {
  return {
    current: initial,
    load() {
      return this.current;
    },
    save(session) {
      this.current = session;
    },
  };
}

function base64UrlDecode(text: string): string {
  const padded = text.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (text.length % 4)) % 4);
  return decodeURIComponent(
    Array.from(atob(padded), (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).join(''),
  );
}

function claimOf(token: string, name: 'exp' | 'iat'): number | null {
  const part = token.split('.')[1];
  if (part === undefined) return null;
  try {
    const claims = JSON.parse(base64UrlDecode(part)) as Record<string, unknown>;
    const value = claims[name];
    return typeof value === 'number' ? value : null;
  } catch {
    return null;
  }
}

/** `exp` of a JWT in seconds, read without verifying (the service verifies; the client only decides when to refresh). */
export function expiryOf(token: string): number | null {
  return claimOf(token, 'exp');
}

/** `iat` of a JWT in seconds (the service's clock when it issued the token). */
export function issuedAtOf(token: string): number | null {
  return claimOf(token, 'iat');
}
