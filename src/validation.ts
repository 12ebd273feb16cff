// Turns zod issues into one message that names each bad field and the value it had.
import { z } from 'zod';

/**
 * A value as refusals quote it: its JSON, cut short (it may be any length). A number JSON
 * cannot carry exactly (1e400 parses as Infinity, which JSON writes as null; digits past 2^53
 * round) is not quoted as what it became.
 */
export function describeValue(value: unknown): string {
  const inexact =
    typeof value === 'number' &&
    (!Number.isFinite(value) || (Number.isInteger(value) && !Number.isSafeInteger(value)));
  if (inexact) return 'a number out of range';
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** Fields whose values are secrets: a refusal names them but never repeats what was sent. */
const SECRET_FIELDS = new Set(['password', 'apiKey', 'token', 'secret']);

function describeIssue(issue: z.core.$ZodIssue, prefix: string): string {
  const path = [prefix, ...issue.path.map(String)].filter((p) => p !== '').join('.') || 'body';
  if (issue.code === 'unrecognized_keys') {
    return `${path}: unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
  }
  // A missing field, whatever its schema would have said of a wrong value (an enum's choices, a
  // union's bare "Invalid input").
  const missing =
    ['invalid_type', 'invalid_value', 'invalid_union'].includes(issue.code) &&
    issue.input === undefined;
  if (missing) return `${path}: is required`;
  return `${path}: ${issue.message}${givenValue(issue)}`;
}

/** What a refusal says of the value given: `, got <value>`, or less where it may hold a secret. */
function givenValue(issue: z.core.$ZodIssue): string {
  // Text where an object or array belongs may be one written out as JSON (a client that encoded
  // `params` twice), secrets and all: only its type is named, unless zod's message names it.
  const textForContainer =
    issue.code === 'invalid_type' &&
    typeof issue.input === 'string' &&
    ['object', 'array', 'record', 'tuple', 'map', 'set'].includes(issue.expected);
  if (textForContainer) return /\breceived string\b/.test(issue.message) ? '' : ', got a string';
  // Custom (cross-field) messages say what they need themselves; their input is the whole object.
  // Only a field's own scalar value is repeated: a whole body, an object or an array may hold a
  // secret field under another name.
  const showValue =
    issue.code !== 'custom' &&
    issue.path.length > 0 &&
    !SECRET_FIELDS.has(String(issue.path.at(-1))) &&
    'input' in issue &&
    issue.input !== undefined &&
    (issue.input === null || typeof issue.input !== 'object');
  return showValue ? `, got ${describeValue(issue.input)}` : '';
}

/** `params.licenses: must be an integer, got 1.5; params.id: is required` */
export function describeIssues(error: z.ZodError, prefix = ''): string {
  return error.issues.map((issue) => describeIssue(issue, prefix)).join('; ');
}

/**
 * A whole number written in decimal digits, from an environment variable, a query string or a
 * flag: what `z.coerce.number()` would also take (blanks as 0, `0x10`, `1e2`) stays a string, so
 * the schema refuses it and names what was given.
 */
export function decimalDigits(value: unknown): unknown {
  return typeof value === 'string' && /^[0-9]+$/.test(value) ? Number(value) : value;
}

/**
 * A character that would shift, break or reverse what follows it where a name is printed (a
 * table, a history line): a control or format character (a tab, a bidi override) or a line or
 * paragraph separator.
 */
export const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

/**
 * Who made a change, as a chain's history records it (`x-operator`, the CLI's user name). It is
 * printed there (`billing chains show`): a tab, a line separator or a bidi override would shift,
 * break or reverse what follows it.
 */
export const operatorNameRule = z
  .string()
  .min(1, 'must not be empty')
  .max(100, 'must be at most 100 characters')
  .refine((name) => !UNPRINTABLE.test(name), 'must not contain control or format characters');
