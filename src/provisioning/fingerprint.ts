// A stable digest of an operation's params, to tell a safe retry from a conflicting reuse of an id.
import { createHash } from 'node:crypto';

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value)
        .filter(([, v]) => v !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([k, v]) => [k, canonical(v)]),
    );
  }
  return value;
}

export function fingerprint(method: string, params: unknown): string {
  return createHash('sha256')
    .update(`${method}\n${JSON.stringify(canonical(params))}`)
    .digest('base64url')
    .slice(0, 22);
}
