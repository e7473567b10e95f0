import { z } from 'zod';

/** Schemas of erasure and export (decisions §11). */

export const eraseCustomerBody = z.object({ id: z.number().int().positive().describe('The CRM customer id (`sync_id`)') });

export const eraseCustomerResponse = z.object({ erased: z.literal(true), userId: z.string() });

export const eraseSelfBody = z.object({ password: z.string().min(1).max(128).describe("The caller's password") });

export const successResponse = z.object({ success: z.literal(true) });

const exportedEvent = z.object({
  stream: z.string(),
  revision: z.number().int(),
  type: z.string(),
  data: z.unknown(),
  occurredAt: z.string(),
});

export const accountExportResponse = z.object({
  exportedAt: z.string(),
  user: z.record(z.string(), z.unknown()).describe('The user as the service keeps it'),
  profile: z.object({ avatar: z.string().nullable(), timezone: z.string(), language: z.string() }),
  crm: z.record(z.string(), z.unknown()),
  devices: z.array(z.object({ device: z.record(z.string(), z.unknown()), role: z.string(), linkedAt: z.string() })),
  sessions: z.array(
    z.object({
      familyId: z.string(),
      createdAt: z.string(),
      lastUsedAt: z.string(),
      ip: z.string().nullable(),
      userAgent: z.string().nullable(),
      status: z.string(),
    }),
  ),
  events: z.array(exportedEvent).describe("The events of the user's own stream and those the user caused as actor"),
});
