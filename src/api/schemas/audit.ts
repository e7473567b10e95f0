import { z } from 'zod';
import { HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT } from '../../audit/device-audit';
import { DEVICE_ROLES } from '../../domain/device';
import { deviceResponse, integerParam } from './devices';

/** Schemas of the auditor endpoints (decisions §9) and of the read-model rebuild. */

const revision = z
  .string()
  .refine((s) => /^\d{1,15}$/.test(s), { message: 'must be a non-negative integer' })
  .transform(Number)
  .pipe(z.number().int().min(0));

const limit = integerParam(1, HISTORY_MAX_LIMIT);

export const deviceHistoryQuery = z
  .object({
  after: revision.optional().describe('The last device-stream revision already seen (exclusive); from the first event when absent'),
  limit: limit.optional().default(HISTORY_DEFAULT_LIMIT).describe(`Events per page, 1 to ${HISTORY_MAX_LIMIT}, default ${HISTORY_DEFAULT_LIMIT} (above: 400)`),
  include: z.enum(['heartbeats']).optional().describe('`heartbeats`: merge `heartbeat-<uuid>` in, in the order the events were recorded'),
  heartbeatAfter: revision
    .optional()
    .describe('With include=heartbeats: the last heartbeat-stream revision already seen (exclusive); pass back meta.nextHeartbeatAfter'),
  })
  .superRefine((q, ctx) => {
    if (q.heartbeatAfter !== undefined && q.include !== 'heartbeats') {
      ctx.addIssue({ code: 'custom', path: ['heartbeatAfter'], message: 'is only allowed with include=heartbeats' });
    }
  });

const isoDateTime = z.iso.datetime({ offset: true, local: true });
const isoDate = z.iso.date();

/** A date (midnight UTC) or a date-time (UTC unless it names an offset), as ISO 8601 UTC with milliseconds. */
export const isoInstant = z
  .string()
  .refine((s) => isoDate.safeParse(s).success || isoDateTime.safeParse(s).success, { message: 'must be a valid ISO 8601 date string' })
  .transform((s) => {
    const zoned = isoDate.safeParse(s).success || /(Z|[+-]\d\d:\d\d)$/i.test(s) ? s : `${s}Z`;
    return new Date(zoned).toISOString();
  });

export const deviceStateQuery = z.object({
  at: isoInstant.optional().describe('ISO 8601 date or date-time; the instant to fold up to (now when absent)'),
});

// Responses (for the OpenAPI document).

const actor = z.object({ type: z.enum(['user', 'device', 'crm', 'system']), id: z.string() });

export const historyItemResponse = z.object({
  stream: z.string().describe('`device-<uuid>`, or `heartbeat-<uuid>` for merged heartbeats'),
  revision: z.number().int().describe('0-based revision within `stream`'),
  type: z.string(),
  data: z.unknown(),
  occurredAt: z.string(),
  actor,
  requestId: z.string().describe('The X-Request-Id of the request that caused the event'),
});

export const deviceHistoryResponse = z.object({
  data: z.array(historyItemResponse),
  meta: z.object({
    uuid: z.string(),
    limit: z.number().int(),
    after: z.number().int().nullable(),
    nextAfter: z.number().int().nullable().describe('Pass back as `after` for the next page'),
    hasMore: z.boolean(),
    heartbeatAfter: z.number().int().nullable().optional().describe('Only with include=heartbeats'),
    nextHeartbeatAfter: z.number().int().nullable().optional().describe('Only with include=heartbeats: pass back as `heartbeatAfter`'),
  }),
});

export const deviceStateResponse = z.object({
  uuid: z.string(),
  at: z.string(),
  revision: z.number().int().nullable().describe('The last event folded in; null before the first registration'),
  status: z.enum(['none', 'active', 'deleted']),
  device: deviceResponse.extend({ lastSeenAt: z.string().nullable(), gen: z.number().int() }).nullable(),
  users: z.array(z.object({ id: z.string(), role: z.enum(DEVICE_ROLES), linkId: z.string(), createdAt: z.string(), updatedAt: z.string() })),
});

export const rebuildResponse = z.object({
  generation: z.number().int(),
  previousGeneration: z.number().int(),
  position: z.string().nullable(),
  events: z.number().int(),
  durationMs: z.number(),
  phases: z.object({ projectMs: z.number(), loadMs: z.number(), catchUpMs: z.number(), switchMs: z.number() }),
  collections: z.record(z.string(), z.number().int()),
});
