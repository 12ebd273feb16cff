// Order ids the workers derive (DESIGN §4): never random, so a retry sends the same id.

/**
 * The longest order id a chain may start with: derived ids add up to `.a{k}.r{n}` to it, and
 * every id must stay within the interface's 128 characters. 24 characters leave room for k and n
 * of 9 digits each (a monthly chain renewing for 80 million years).
 */
export const MAX_PARENT_ORDER_ID_LENGTH = 128 - 24;

/** The renewal that orders term `count` (1-based) of the chain started by `parent`. */
export function renewalOrderId(parent: string, count: number): string {
  return `${parent}.r${count}`;
}

/** The k-th co-terminated partial order of a chain. */
export function partialOrderId(parent: string, k: number): string {
  return `${parent}.p${k}`;
}

/** The k-th add-on chain of a chain (its own renewals are `${addOn}.r${n}`). */
export function addOnOrderId(parent: string, k: number): string {
  return `${parent}.a${k}`;
}
