// Every Redis key of the provisioning core, built in one place. They share the product's hash tag
// (src/redis/key-space.ts). Caller-supplied ids (which may hold `:` or be all digits) never appear
// in key names: they are fields of the partner's hashes.
import { CORE_KEY_ROOT as ROOT } from '../redis/key-space.js';

export const registryKeys = {
  /** HASH partner id -> partner JSON */
  partners: `${ROOT}:partners`,
  /** HASH partner name -> partner id */
  partnerNames: `${ROOT}:partner-names`,
  /** HASH HMAC(api key) -> partner id */
  partnerKeys: `${ROOT}:partner-keys`,
  /** HASH sequence name -> last value (partner ids) */
  sequences: `${ROOT}:seq`,
  /** STRING fingerprint of the KEY_HASH_SECRET the keys in `partnerKeys` are hashed with */
  keyHashFingerprint: `${ROOT}:key-hash-fingerprint`,
  /** STREAM emails the core would send (onboarding), for a later delivery capability */
  outbox: `${ROOT}:outbox`,
} as const;

export type PartnerKeys = ReturnType<typeof partnerKeys>;

export function partnerKeys(partnerId: number) {
  const scope = `${ROOT}:p${partnerId}`;
  return {
    /** HASH caller customer id -> customer record JSON */
    customers: `${scope}:customers`,
    /** HASH caller order id -> order record JSON */
    orders: `${scope}:orders`,
    /** HASH caller id of a chain's first order -> chain record JSON */
    chains: `${scope}:chains`,
    /** HASH instance id -> caller customer id */
    instances: `${scope}:instances`,
    /** HASH lower-cased email -> user record JSON (the fields that never change) */
    users: `${scope}:users`,
    /** HASH lower-cased email -> "1" | "0" */
    usersActive: `${scope}:users:active`,
    /** HASH lower-cased email -> scrypt hash */
    usersPassword: `${scope}:users:password`,
    /** HASH sequence name -> last value (internal ids of this partner) */
    sequences: `${scope}:seq`,
  };
}
