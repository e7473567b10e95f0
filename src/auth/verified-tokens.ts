import { hash } from 'node:crypto';

/**
 * The key a token is remembered under: the SHA-256 digest of its text, as a string of 32
 * one-byte characters; none for a token that is not all printable ASCII (a JWT always is), so
 * that one digest is one text (the digest is of the UTF-8 bytes, and for ASCII those are the
 * text's own characters). A token without a key is never remembered: it is checked in full.
 */
const PRINTABLE_ASCII = /^[\x21-\x7e]*$/;
const keyOf = (token: string): string | undefined => (PRINTABLE_ASCII.test(token) ? hash('sha256', token, 'binary') : undefined);

/**
 * Tokens that passed a full verification, remembered by (a digest of) their exact text until they expire.
 *
 * An app sends the same access token with every request for up to 15 minutes, and a hub the
 * same device token with every heartbeat for a day; checking its signature and parsing its
 * claims again each time is the largest fixed cost of a request. Only a token that verified is
 * ever kept, under the SHA-256 digest of its whole text, signature included, so a hit means the
 * very bytes that were checked: nothing forged or altered can match (that would take another
 * text with the same SHA-256 digest). The digest, not the text, is the key: 32 bytes instead of
 * the token's few hundred, for each of the thousands of hubs whose device token is remembered
 * between their heartbeats. Expiry is checked again on every hit, the way
 * the verifier checks it (`now >= exp` is expired, in whole seconds), and an expired entry is
 * dropped so that the full verification answers it with its own message. What a token's claims
 * cannot tell (revocation by generation, deactivation) is still checked by the caller on every
 * request. Bounded: past `capacity` the oldest entry gives way.
 */
export class VerifiedTokens<Claims extends { readonly exp: number }> {
  private readonly entries = new Map<string, Claims>();

  constructor(
    private readonly capacity: number,
    private readonly nowMs: () => number = Date.now,
  ) {}

  /** The claims of a token verified before and not yet expired, or undefined. */
  get(token: string): Claims | undefined {
    const key = keyOf(token);
    if (key === undefined) return undefined;
    const claims = this.entries.get(key);
    if (claims === undefined) return undefined;
    if (Math.floor(this.nowMs() / 1000) >= claims.exp) {
      this.entries.delete(key);
      return undefined;
    }
    return claims;
  }

  /** Keeps what a full verification of `token` gave. */
  remember(token: string, claims: Claims): Claims {
    Object.freeze(claims);
    const key = keyOf(token);
    if (key === undefined) return claims;
    if (this.entries.size >= this.capacity) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
    this.entries.set(key, claims);
    return claims;
  }

  get size(): number {
    return this.entries.size;
  }
}
