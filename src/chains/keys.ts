// Every Redis key of the chain store. Caller ids (which may hold `:` or be all digits) are hashed,
// never embedded raw, in keys and in job ids.
import { createHash } from 'node:crypto';
import { WORKER_KEY_ROOT as ROOT } from '../redis/key-space.js';

/** A short, stable, key- and job-id-safe digest of a caller-supplied id. */
export function digest(value: string): string {
  return createHash('sha256').update(value).digest('base64url').slice(0, 22);
}

/** The chain id of the chain whose first order is `parentOrderId`. */
export function chainIdOf(parentOrderId: string): string {
  return `c${digest(parentOrderId)}`;
}

export function chainKeys(chainId: string) {
  const scope = `${ROOT}:chain:${chainId}`;
  return {
    /** STRING `<version>|<record JSON>`: scripts read the version without decoding the JSON */
    chain: scope,
    /** STRING the intent JSON (the order about to be sent), absent when there is none */
    intent: `${scope}:intent`,
    /** LIST history entries JSON, oldest first */
    history: `${scope}:history`,
    /** STRING lock token, with a lease (PX) */
    lock: `${scope}:lock`,
  };
}

export const indexKeys = {
  /** HASH any order id of any chain -> chain id */
  orders: `${ROOT}:index:orders`,
  /** ZSET chain id scored by nextRenewalAt (only chains that will renew) */
  due: `${ROOT}:index:due`,
  /** ZSET every chain id scored by creation time: what reconcile walks */
  all: `${ROOT}:index:chains`,
  /** HASH customer id digest -> nothing; see customerChains */
  customerPrefix: `${ROOT}:index:customer:`,
  /** HASH customer id -> "1" once the workers created (or found) it at the provider */
  knownCustomers: `${ROOT}:index:known-customers`,
};

/** SET of the chain ids of one customer. */
export function customerChainsKey(customerId: string): string {
  return `${indexKeys.customerPrefix}${digest(customerId)}`;
}
