import { z } from 'zod';
import { DEVICE_ROLES, type JsonObject } from '../../domain/device';
import { DEVICE_SORT_FIELDS } from '../../projections/devices';

/**
 * Request schemas of the device endpoints (decisions §4 limits): name and deviceId 1–100
 * characters, other strings 255, e-mail 254, metadata at most 8 KiB serialized and 5
 * levels deep. A value of the wrong type (`{"$gt": ""}` for a string) is a 400.
 */

export const METADATA_MAX_BYTES = 8 * 1024;
/** The metadata object itself is level 1; every nested object or array adds one. */
export const METADATA_MAX_DEPTH = 5;
export const MAX_PAGE = 1_000_000;
export const MAX_LIMIT = 100;

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Any 8-4-4-4-12 hex UUID (hubs bring their own, not always RFC 4122 variants); kept lowercase so one device has one stream. */
export const deviceUuid = z
  .string()
  .refine((s) => GUID.test(s), { message: 'must be a UUID' })
  .transform((s) => s.toLowerCase())
  .describe('A UUID (8-4-4-4-12 hex digits)');

const text = (max: number) => z.string().trim().min(1).max(max);
const optionalText = (max: number) => z.string().max(max).nullish().transform((v) => v ?? undefined);

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** What is wrong with a metadata value, or null. Walks at most METADATA_MAX_DEPTH + 1 levels. */
function metadataProblem(value: unknown): string | null {
  if (!isPlainObject(value)) return 'must be an object';
  const walk = (node: unknown, depth: number): string | null => {
    if (node === null || typeof node === 'string' || typeof node === 'boolean') return null;
    if (typeof node === 'number') return Number.isFinite(node) ? null : 'must contain only JSON values';
    if (typeof node !== 'object') return 'must contain only JSON values';
    if (depth > METADATA_MAX_DEPTH) return `must not be nested more than ${METADATA_MAX_DEPTH} levels deep`;
    const entries = Array.isArray(node) ? node.map((item): [string, unknown] => ['', item]) : Object.entries(node);
    // Keys are free-form (a dot or a leading $ included): the read models keep metadata as JSON text (src/projections/devices.ts).
    for (const [, child] of entries) {
      const problem = walk(child, depth + 1);
      if (problem !== null) return problem;
    }
    return null;
  };
  const problem = walk(value, 1);
  if (problem !== null) return problem;
  if (Buffer.byteLength(JSON.stringify(value), 'utf8') > METADATA_MAX_BYTES) {
    return `must not be larger than ${METADATA_MAX_BYTES} bytes when serialized`;
  }
  return null;
}

export const metadata = z
  .unknown()
  .superRefine((value, ctx) => {
    const problem = metadataProblem(value);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
  })
  .transform((value) => value as JsonObject)
  .describe(`A JSON object, at most ${METADATA_MAX_BYTES} bytes serialized and ${METADATA_MAX_DEPTH} levels deep`);

export const registerDeviceBody = z.object({
  uuid: deviceUuid,
  deviceId: text(100),
  name: text(100),
  ipAddress: optionalText(255),
  port: optionalText(255),
  metadata: metadata.nullish().transform((v) => v ?? undefined),
});

export const updateDeviceBody = z.object({
  name: text(100).optional(),
  ipAddress: z.string().max(255).optional(),
  port: z.string().max(255).optional(),
  metadata: metadata.optional(),
});

export const heartbeatBody = z.object({
  ipAddress: z.string().max(255).optional(),
  metadata: metadata.optional(),
});

export const linkUserBody = z.object({
  email: z
    .string()
    .trim()
    .max(254)
    .pipe(z.email())
    .transform((s) => s.toLowerCase()),
  role: z.enum(DEVICE_ROLES),
});

/** A whole number in a query string, within [min, max]: out of range however far gives the bound's one message. */
export const integerParam = (min: number, max: number) =>
  z
    .string()
    .refine((s) => /^-?\d+$/.test(s), { message: 'must be an integer' })
    // Out of range however far (-1, or more digits than a double holds): one message, the bound's.
    .transform((s) => Math.min(Math.max(Number(s), min - 1), max + 1))
    .pipe(z.number().int().min(min).max(max));

const isoDateTime = z.iso.datetime({ offset: true, local: true });
const isoDate = z.iso.date();

/** A date (midnight UTC) or a date-time (UTC unless it names an offset), as ISO 8601 UTC with milliseconds. */
const isoInstant = z
  .string()
  .refine((s) => isoDate.safeParse(s).success || isoDateTime.safeParse(s).success, { message: 'must be a valid ISO 8601 date string' })
  .transform((s) => {
    const zoned = isoDate.safeParse(s).success || /(Z|[+-]\d\d:\d\d)$/i.test(s) ? s : `${s}Z`;
    return new Date(zoned).toISOString();
  });

const roleList = z
  .string()
  .transform((s) => s.split(',').map((role) => role.trim()))
  .refine((roles) => roles.every((role) => (DEVICE_ROLES as readonly string[]).includes(role)), {
    message: `must be a comma-separated list of: ${DEVICE_ROLES.join(', ')}`,
  })
  .transform((roles) => roles as Array<(typeof DEVICE_ROLES)[number]>);

export const listDevicesQuery = z
  .object({
    page: integerParam(1, MAX_PAGE).optional().default(1).describe('1-based page, default 1'),
    limit: integerParam(1, MAX_LIMIT).optional().default(20).describe(`Items per page, 1 to ${MAX_LIMIT}, default 20 (above: 400)`),
    online: z
      .enum(['true', 'false'])
      .transform((v) => v === 'true')
      .optional(),
    sort: z.enum(DEVICE_SORT_FIELDS).optional().default('createdAt'),
    order: z.enum(['asc', 'desc']).optional().default('desc'),
    role: roleList.optional().describe('Comma list of the caller\'s roles, e.g. `owner,editor`'),
    createdAfter: isoInstant.optional().describe('ISO 8601 date or date-time; createdAt at or after it'),
    createdBefore: isoInstant.optional().describe('ISO 8601 date or date-time; createdAt at or before it'),
  })
  .superRefine((q, ctx) => {
    if (q.createdAfter !== undefined && q.createdBefore !== undefined && q.createdAfter > q.createdBefore) {
      ctx.addIssue({ code: 'custom', path: ['createdAfter'], message: 'must not be later than createdBefore' });
    }
  });

export const deviceIdParams = z.object({ id: z.string().describe('The internal device id or the device uuid') });
export const deviceUuidParams = z.object({ uuid: z.string().describe('The device uuid') });
export const deviceUserParams = deviceIdParams.extend({ userId: z.string() });

// Responses (for the OpenAPI document).

const role = z.enum(DEVICE_ROLES);

export const deviceResponse = z.object({
  id: z.string(),
  uuid: z.string(),
  deviceId: z.string(),
  name: z.string(),
  ipAddress: z.string().nullable(),
  port: z.string(),
  isOnline: z.boolean(),
  metadata: z.record(z.string(), z.unknown()).nullable(),
  createdAt: z.string(),
  updatedAt: z.string(),
});

export const deviceDetailResponse = deviceResponse.extend({
  lastSeenAt: z.string().nullable(),
  role: role.nullable().describe('The caller\'s role; null for an admin reading a device it is not linked to'),
  users: z.array(z.object({ id: z.string(), email: z.string().nullable(), role })),
});

export const updatedDeviceResponse = deviceResponse.omit({ createdAt: true });

export const deviceListResponse = z.object({
  data: z.array(
    z.object({
      id: z.string(),
      uuid: z.string(),
      deviceId: z.string(),
      name: z.string(),
      isOnline: z.boolean(),
      lastSeenAt: z.string().nullable(),
      role,
    }),
  ),
  meta: z.object({ total: z.number(), page: z.number(), limit: z.number(), totalPages: z.number() }),
});

export const linkResponse = z.object({
  success: z.literal(true),
  deviceUser: z.object({ id: z.string(), userId: z.string(), deviceId: z.string(), role, isActive: z.boolean(), createdAt: z.string() }),
});

export const successResponse = z.object({ success: z.literal(true) });

export const deviceTokenResponse = z.object({ token: z.string(), expiresIn: z.number() });

export const heartbeatResponse = z.object({
  success: z.literal(true),
  device: z.object({ id: z.string(), isOnline: z.literal(true), lastSeenAt: z.string() }),
});
