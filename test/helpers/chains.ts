// Chains as the workers write them, for tests that store or schedule one directly.
import { chainIdOf } from '../../src/chains/keys.js';
import { type Chain, chainRecord, newChainRecord } from '../../src/chains/records.js';

const DAY = 86_400;

/**
 * A monthly chain of the first order `order`, placed at `now`: its first term runs from `now`
 * for 31 days and renews 24 days in; `overrides` go last. Always one the store can read back.
 */
export function chainFor(
  order: string,
  now: number,
  overrides: Partial<Omit<Chain, 'version'>> = {},
): Omit<Chain, 'version'> {
  const next: Omit<Chain, 'version'> = newChainRecord({
    id: chainIdOf(order),
    order,
    customer: 'cust-1',
    product: 'prod-1',
    duration: 'monthly',
    status: 'active',
    autoRenew: true,
    payment: 'ok',
    needsReactivation: false,
    licenses: 10,
    nextLicenses: 10,
    term: { orderId: order, count: 1, startsAt: now, expiresAt: now + 31 * DAY },
    previousTerm: null,
    partials: [],
    addOns: [],
    mainChain: null,
    intent: null,
    nextRenewalAt: now + 24 * DAY,
    flagged: null,
    createdAt: now,
    updatedAt: now,
    ...overrides,
  });
  chainRecord.parse({ ...next, version: 0 });
  return next;
}

/**
 * A stored chain (version 1) made of `fields` over an active monthly chain created 60 days
 * before `now`, whose renewal fires 7 days before its term ends: for tests of what a seat job
 * reads from a family of chains.
 */
export function storedChain(
  now: number,
  fields: Partial<Chain> & Pick<Chain, 'id' | 'licenses' | 'term'>,
): Chain {
  return {
    ...newChainRecord({
      order: fields.id,
      customer: 'C-1',
      product: 'suite-std',
      duration: 'monthly',
      status: 'active',
      autoRenew: true,
      payment: 'ok',
      nextLicenses: fields.licenses,
      intent: null,
      nextRenewalAt: fields.term.expiresAt - 7 * DAY,
      createdAt: now - 60 * DAY,
      updatedAt: now,
      ...fields,
    }),
    version: 1,
  };
}
