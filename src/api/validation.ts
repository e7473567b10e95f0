import { z } from 'zod';
import { ValidationError, type FieldProblem } from '../domain/errors';

/**
 * Turns zod issues into the messages apps already know ("email must be an email",
 * "name should not be empty"), one per field problem.
 */
function describeIssue(issue: z.core.$ZodIssue, input: unknown): FieldProblem {
  const field = issue.path.length > 0 ? issue.path.map(String).join('.') : 'body';
  const given = issue.path.reduce<unknown>(
    (value, key) => (value !== null && typeof value === 'object' ? (value as Record<PropertyKey, unknown>)[key] : undefined),
    input,
  );
  const message = (() => {
    switch (issue.code) {
      case 'invalid_type':
        if (given === undefined || given === null) return `${field} should not be empty`;
        return `${field} must be ${article(issue.expected)} ${issue.expected}`;
      case 'invalid_format':
        if (issue.format === 'email') return `${field} must be an email`;
        if (issue.format === 'uuid') return `${field} must be a UUID`;
        if (issue.format === 'datetime') return `${field} must be a valid ISO 8601 date string`;
        return `${field} must match the ${issue.format} format`;
      case 'too_small':
        if (issue.origin === 'string' && Number(issue.minimum) <= 1) return `${field} should not be empty`;
        if (issue.origin === 'string') return `${field} must be longer than or equal to ${String(issue.minimum)} characters`;
        // An exclusive bound of 0 is `.positive()`: 0 itself is refused, so "not less than 0" would mislead.
        if (issue.inclusive === false && Number(issue.minimum) === 0) return `${field} must be a positive number`;
        if (issue.inclusive === false) return `${field} must be greater than ${String(issue.minimum)}`;
        return `${field} must not be less than ${String(issue.minimum)}`;
      case 'too_big':
        if (issue.origin === 'string') return `${field} must be shorter than or equal to ${String(issue.maximum)} characters`;
        return `${field} must not be greater than ${String(issue.maximum)}`;
      case 'invalid_value':
        return `${field} must be one of the following values: ${issue.values.map(String).join(', ')}`;
      case 'unrecognized_keys':
        return `property ${issue.keys.join(', ')} should not exist`;
      default:
        return `${field} ${issue.message}`;
    }
  })();
  return { field, message };
}

function article(word: string): string {
  return /^[aeiou]/i.test(word) ? 'an' : 'a';
}

/** Parses untrusted input with a schema; throws a ValidationError the error middleware maps to 400. */
export function parseInput<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => describeIssue(issue, input));
  throw new ValidationError(problems);
}
