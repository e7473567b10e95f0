import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';

/**
 * The ciphers of crypto-shredding, all from node:crypto: AES-256-GCM (authenticated) for
 * personal fields under a data key, and for data keys under the key-encryption key; HMAC-
 * SHA-256 for names that must not reveal an e-mail address or an IP (keyed, so a
 * dictionary of addresses cannot find them).
 */

const IV_BYTES = 12;
const TAG_BYTES = 16;
export const DATA_KEY_BYTES = 32;

/** The keys derived from DATA_KEY_ENCRYPTION_KEY's one secret, each for one purpose. */
export interface PrivacyKeys {
  /** Wraps the data keys kept in the credential store. */
  readonly keyEncryptionKey: Buffer;
  /** Names the e-mail reservation streams. */
  readonly emailHashKey: Buffer;
  /** Names rate-limit counters kept by client IP. */
  readonly counterKey: Buffer;
}

function derive(secret: string, purpose: string): Buffer {
  return Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), Buffer.from('home-hub-cloud', 'utf8'), Buffer.from(purpose, 'utf8'), 32));
}

export function derivePrivacyKeys(secret: string): PrivacyKeys {
  return {
    keyEncryptionKey: derive(secret, 'data-key-wrap'),
    emailHashKey: derive(secret, 'email-reservation'),
    counterKey: derive(secret, 'rate-limit-counter'),
  };
}

export function newDataKey(): Buffer {
  return randomBytes(DATA_KEY_BYTES);
}

/** iv | tag | ciphertext, base64url; `aad` binds the box to where it belongs. */
export function seal(key: Buffer, plaintext: Buffer, aad: string): string {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url');
}

/** The plaintext, or null when the box does not open with this key (another key, damage). */
export function open(key: Buffer, box: string, aad: string): Buffer | null {
  const bytes = Buffer.from(box, 'base64url');
  if (bytes.length < IV_BYTES + TAG_BYTES) return null;
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(0, IV_BYTES));
    decipher.setAAD(Buffer.from(aad, 'utf8'));
    decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    return Buffer.concat([decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]);
  } catch {
    return null;
  }
}

export function keyedHash(key: Buffer, value: string): string {
  return createHmac('sha256', key).update(value, 'utf8').digest('hex');
}
