// Order ids the workers derive (DESIGN §4): never random, so a retry sends the same id.

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
