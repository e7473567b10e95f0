/**
 * Tokens that passed a full verification, remembered by their exact text until they expire.
 *
 * An app sends the same access token with every request for up to 15 minutes, and a hub the
 * same device token with every heartbeat for a day; checking its signature and parsing its
 * claims again each time is the largest fixed cost of a request. Only a token that verified is
 * ever kept, under its whole text, signature included, so a hit means the very bytes that were
 * checked: nothing forged or altered can match. Expiry is checked again on every hit, the way
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
    const claims = this.entries.get(token);
    if (claims === undefined) return undefined;
    if (Math.floor(this.nowMs() / 1000) >= claims.exp) {
      this.entries.delete(token);
      return undefined;
    }
    return claims;
  }

  /** Keeps what a full verification of `token` gave. */
  remember(token: string, claims: Claims): Claims {
    if (this.entries.size >= this.capacity) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
    this.entries.set(token, Object.freeze(claims));
    return claims;
  }

  get size(): number {
    return this.entries.size;
  }
}
