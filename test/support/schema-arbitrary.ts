import fc from 'fast-check';
import { z } from 'zod';

/**
 * fast-check arbitraries from the same zod schemas that validate requests: values the
 * schema accepts (through its JSON Schema, which is what clients see too), and values
 * it must refuse with a 400: wrong types, missing fields, out-of-range, huge and deeply
 * nested values, operator objects, `__proto__` keys and odd unicode.
 */

type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  enum?: unknown[];
  const?: unknown;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  format?: string;
  pattern?: string;
};

export function jsonSchemaOf(schema: z.ZodType): JsonSchema {
  return z.toJSONSchema(schema, { io: 'input', target: 'draft-2020-12', unrepresentable: 'any' }) as JsonSchema;
}

const text = (min = 0, max = 40): fc.Arbitrary<string> => fc.string({ minLength: min, maxLength: max, unit: 'grapheme' });

function stringOf(schema: JsonSchema): fc.Arbitrary<string> {
  switch (schema.format) {
    case 'uuid':
      return fc.uuid({ version: 4 });
    case 'email':
      return email;
    case 'date-time':
      return isoDate;
    default:
      break;
  }
  if (schema.pattern !== undefined) return fc.stringMatching(new RegExp(schema.pattern));
  const min = schema.minLength ?? 0;
  const max = Math.min(schema.maxLength ?? 40, Math.max(min, 40));
  // Printable text only where a schema gives no pattern: the validator trims nothing.
  return fc.string({ minLength: min, maxLength: max, unit: 'grapheme-ascii' }).filter((s) => s.trim().length >= Math.min(min, 1));
}

const email = fc
  .tuple(fc.stringMatching(/^[a-z][a-z0-9]{0,10}$/), fc.stringMatching(/^[a-z]{1,10}$/))
  .map(([local, domain]) => `${local}@${domain}.example.com`);
const isoDate = fc.date({ min: new Date('2020-01-01'), max: new Date('2030-01-01'), noInvalidDate: true }).map((d) => d.toISOString());
const smallJsonObject = fc.dictionary(fc.stringMatching(/^[a-z]{1,8}$/), fc.oneof(fc.string({ maxLength: 10 }), fc.integer(), fc.boolean(), fc.constant(null)), { maxKeys: 3 });
const decimalText = (min: number, max: number): fc.Arbitrary<string> => fc.integer({ min, max }).map(String);

/**
 * What a field means where its JSON Schema cannot say it (refinements, pipes and query
 * strings lose their formats on the way): by the field's name, as the spec names them.
 */
const FIELD_HINTS: Readonly<Record<string, fc.Arbitrary<unknown>>> = {
  email: email,
  uuid: fc.uuid(),
  deviceUuid: fc.uuid(),
  metadata: smallJsonObject,
  page: decimalText(1, 1000),
  limit: decimalText(1, 100),
  after: decimalText(0, 1000),
  heartbeatAfter: decimalText(0, 1000),
  createdAfter: isoDate,
  createdBefore: isoDate,
  at: isoDate,
  role: fc.constantFrom('owner', 'editor', 'viewer'),
};

/**
 * A value the schema accepts, best effort: refinements a JSON Schema cannot say are the
 * caller's to check (with the zod schema itself), `hints` say by field name what they mean.
 */
export function validValue(schema: JsonSchema, depth = 0, hints: Readonly<Record<string, fc.Arbitrary<unknown>>> = FIELD_HINTS): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum !== undefined) return fc.constantFrom(...schema.enum);
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives !== undefined) return fc.oneof(...alternatives.map((s) => validValue(s, depth, hints)));
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;
  if (schema.type === 'null') return fc.constant(null);
  switch (type) {
    case 'string':
      return stringOf(schema);
    case 'integer':
      return fc.integer({ min: schema.minimum ?? 1, max: Math.min(schema.maximum ?? 1000, 1_000_000) });
    case 'number':
      return fc.double({ min: schema.minimum ?? 0, max: schema.maximum ?? 1000, noNaN: true, noDefaultInfinity: true });
    case 'boolean':
      return fc.boolean();
    case 'array':
      return fc.array(validValue(schema.items ?? {}, depth + 1, hints), { maxLength: 3 });
    case 'object':
      return objectOf(schema, depth, hints);
    default:
      return fc.oneof(fc.string({ maxLength: 10 }), fc.integer(), fc.boolean());
  }
}

function objectOf(schema: JsonSchema, depth: number, hints: Readonly<Record<string, fc.Arbitrary<unknown>>>): fc.Arbitrary<unknown> {
  if (schema.properties === undefined || depth > 3) return smallJsonObject;
  const record: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [key, property] of Object.entries(schema.properties)) record[key] = hints[key] ?? validValue(property, depth + 1, hints);
  return fc.record(record, { requiredKeys: (schema.required ?? []).filter((k) => k in record) });
}

/** Known values for some fields (a real device, a real user), everything else from the schema. */
export function withHints(extra: Readonly<Record<string, fc.Arbitrary<unknown>>>): Readonly<Record<string, fc.Arbitrary<unknown>>> {
  return { ...FIELD_HINTS, ...extra };
}

/** Anything a hostile or careless client might send in place of a value. */
export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.constant(''),
  fc.boolean(),
  fc.integer(),
  fc.double(),
  fc.constant(1e308),
  fc.constant(-1),
  text(0, 20),
  fc.constant('x'.repeat(70_000)),
  fc.constant('\u0000\ud83d\ude00\u202e\uffff'),
  fc.constant({ $gt: '' }),
  fc.constant({ $where: 'sleep(1000)' }),
  fc.constant(JSON.parse('{"__proto__": {"polluted": true}}') as unknown),
  fc.constant({ constructor: { prototype: { polluted: true } } }),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.constant(deep(200)),
);

function deep(levels: number): unknown {
  let value: unknown = 'bottom';
  for (let i = 0; i < levels; i++) value = { nested: value };
  return value;
}

/** A valid object with one field broken, dropped, or an extra hostile key added. */
export function brokenObject(schema: JsonSchema): fc.Arbitrary<unknown> {
  const keys = Object.keys(schema.properties ?? {});
  if (keys.length === 0) return hostileValue;
  return fc.tuple(validValue(schema), fc.constantFrom(...keys), hostileValue, fc.constantFrom('replace', 'drop', 'proto')).map(([valid, key, bad, how]) => {
    const copy: Record<string, unknown> = { ...(valid as Record<string, unknown>) };
    if (how === 'replace') copy[key] = bad;
    else if (how === 'drop') delete copy[key];
    else return JSON.parse(`{"__proto__": ${JSON.stringify({ admin: true })}, ${JSON.stringify(key)}: ${JSON.stringify(bad ?? null)}}`) as unknown;
    return copy;
  });
}
