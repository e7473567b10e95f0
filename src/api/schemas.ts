import { z } from 'zod';

/** Request schemas: the single source of truth for validation (and, later, the OpenAPI document). */

const optionalInt = z.number().int().nullish().transform((v) => v ?? undefined);
const optionalText = z.string().max(255).nullish().transform((v) => v ?? undefined);

export const syncCustomerBody = z.object({
  id: z.number().int().positive(),
  user_id: optionalInt,
  company_name: optionalText,
  first_name: z.string().trim().min(1).max(255),
  last_name: z.string().trim().min(1).max(255),
  email: z.string().trim().max(254).pipe(z.email()).transform((s) => s.toLowerCase()),
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
