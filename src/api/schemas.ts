import { z } from 'zod';
import { PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH } from '../auth/passwords';

/** Request schemas: the single source of truth for validation (and, later, the OpenAPI document). */

const optionalInt = z.number().int().nullish().transform((v) => v ?? undefined);
const optionalText = z.string().max(255).nullish().transform((v) => v ?? undefined);
/** Trimmed and lower-cased: addresses are stored, indexed and compared that way. */
const emailAddress = z.string().trim().max(254).pipe(z.email()).transform((s) => s.toLowerCase());

export const syncCustomerBody = z.object({
  id: z.number().int().positive(),
  user_id: optionalInt,
  company_name: optionalText,
  first_name: z.string().trim().min(1).max(255),
  last_name: z.string().trim().min(1).max(255),
  email: emailAddress,
  user_type: optionalInt,
  mrr: z
    .union([z.number().finite(), z.string().trim().regex(/^-?\d+(\.\d+)?$/, 'must be a decimal number')])
    .nullish()
    .transform((v) => (v === null || v === undefined ? undefined : typeof v === 'number' ? decimalString(v) : v)),
  active: z.boolean(),
  contract_language: optionalText,
  created_by: optionalInt,
  status: optionalInt,
});

export type SyncCustomerBody = z.infer<typeof syncCustomerBody>;

/** A decimal kept as text, never a float: 99.9 stays "99.9", 1e21 becomes its full digits. */
function decimalString(n: number): string {
  const s = String(n);
  if (!/e/i.test(s)) return s;
  return n.toLocaleString('en-US', { useGrouping: false, maximumFractionDigits: 20 });
}

// ---------------------------------------------------------------------------------------
// Authentication (decisions §3)

/** New passwords; bounded so one argon2 run stays cheap to feed. */
const newPassword = z.string().min(PASSWORD_MIN_LENGTH).max(PASSWORD_MAX_LENGTH);

export const loginBody = z.object({
  email: emailAddress,
  // Any length a password could have had; checked against the hash, never against rules.
  password: z.string().min(1).max(1024),
});

export const refreshBody = z.object({ refreshToken: z.string().min(1).max(4096) });

export const passwordResetRequestBody = z.object({ email: emailAddress });

export const passwordResetConfirmBody = z.object({
  token: z.string().min(1).max(512),
  password: newPassword,
});

// Responses (documentation only: the OpenAPI document shows them).

const userSummary = z.object({
  id: z.uuid(),
  email: z.email(),
  firstName: z.string(),
  lastName: z.string(),
  role: z.enum(['user', 'admin']),
});

export const tokenPairResponse = z.object({
  accessToken: z.string(),
  refreshToken: z.string(),
  expiresIn: z.literal(900),
});

export const loginResponse = tokenPairResponse.extend({ user: userSummary });

export const messageResponse = z.object({ message: z.string() });

/** The user as sync-customer answers it (interface: "User as returned by sync-customer"). */
export const syncCustomerResponse = z.object({
  success: z.literal(true),
  user: z.object({
    id: z.uuid(),
    sync_id: z.number().int(),
    email: z.email(),
    firstName: z.string(),
    lastName: z.string(),
    isActive: z.boolean(),
    createdAt: z.iso.datetime(),
  }),
  created: z.boolean(),
});

/** The sync-customer 409 body: the interface's own shape for it. */
export const syncConflictResponse = z.object({ success: z.literal(false), error: z.string(), code: z.literal('CONFLICT') });

export const healthResponse = z.object({ status: z.literal('ok'), service: z.literal('home-hub-cloud') });

export const readinessResponse = z.object({
  status: z.enum(['ok', 'unavailable']),
  checks: z.record(z.string(), z.object({ status: z.enum(['ok', 'down', 'lagging', 'failed']) })),
});

export const userResponse = userSummary.extend({
  isActive: z.boolean(),
  isEmailVerified: z.boolean(),
  profile: z.object({ avatar: z.string().nullable(), timezone: z.string(), language: z.string() }),
  devices: z.array(
    z.object({ id: z.string(), name: z.string(), role: z.enum(['owner', 'editor', 'viewer']), isOnline: z.boolean() }),
  ),
  createdAt: z.iso.datetime(),
  updatedAt: z.iso.datetime(),
});
