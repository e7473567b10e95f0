import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * The CRM's internal API keys. Digests are compared in constant time, so neither a key's
 * content nor its length leaks; a matched key is known afterwards only by a short id
 * (for rate limiting and for the `actor` of events), never by its value.
 */
export type ApiKeyMatcher = (given: string | undefined) => string | null;

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

export function createApiKeyMatcher(keys: readonly string[]): ApiKeyMatcher {
  const digests = keys.map(digest);
  return (given) => {
    if (given === undefined) return null;
    const givenDigest = digest(given);
    let matched = false;
    for (const d of digests) matched = timingSafeEqual(d, givenDigest) || matched;
    return matched ? givenDigest.subarray(0, 8).toString('hex') : null;
  };
}
