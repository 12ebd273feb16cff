// A main chain and its add-on chains: finding the main one, creating an add-on.
import { randomUUID } from 'node:crypto';
import { withNextRenewalAt } from '../domain/renewal.js';
import { TransientError } from '../errors.js';
import {
  type Chain,
  type HistoryEntry,
  type NewChain,
  newChainRecord,
  type Term,
} from './records.js';
import type { ChainStore } from './store.js';

/** The main chain's id for any order of the family (an event may name an add-on's order). */
export async function mainChainIdOf(chains: ChainStore, orderId: string): Promise<string | null> {
  const chain = await chains.getByOrder(orderId);
  if (!chain) return null;
  return chain.mainChain ?? chain.id;
}

/** The main chains of the add-ons among `chains`, by id, read together (one that is gone is absent). */
export async function mainChainsOf(
  store: ChainStore,
  chains: readonly Chain[],
): Promise<Map<string, Chain>> {
  const ids = [...new Set(chains.flatMap((c) => (c.mainChain === null ? [] : [c.mainChain])))];
  return new Map((await store.getMany(ids)).map((main) => [main.id, main]));
}

/**
 * A new add-on chain of `main`: its first term, its licenses, and its renewal time from `now`.
 * Its own auto-renew flag stays on so that its schedule exists: the main chain's governs it.
 */
export function newAddOnRecord(
  main: Chain,
  addOn: { id: string; licenses: number; term: Term },
  now: number,
  leadDays: number,
): NewChain {
  const fresh = newChainRecord({
    id: addOn.id,
    order: addOn.term.orderId,
    customer: main.customer,
    product: main.product,
    duration: main.duration,
    status: 'active',
    autoRenew: true,
    payment: main.payment,
    licenses: addOn.licenses,
    nextLicenses: addOn.licenses,
    term: addOn.term,
    mainChain: main.id,
    intent: null,
    nextRenewalAt: null,
    createdAt: now,
    updatedAt: now,
  });
  return withNextRenewalAt(fresh, now, leadDays);
}

/** Stores a chain that does not exist yet (an add-on), under its own fresh lock. */
export async function createChain(
  chains: ChainStore,
  next: NewChain,
  history: readonly HistoryEntry[],
  orderIds: readonly string[],
): Promise<Chain> {
  const token = `create/${randomUUID()}`;
  const lock = await chains.lock(next.id, token);
  if (lock.kind === 'locked') {
    throw new TransientError('chain_locked', `chain ${next.order} is being created elsewhere`);
  }
  try {
    if (lock.chain) return lock.chain;
    return await chains.save({
      chainId: next.id,
      token,
      previous: null,
      next,
      history,
      orderIds,
      release: true,
    });
  } finally {
    await chains.unlock(next.id, token);
  }
}

/**
 * Whether a main chain lets its add-ons renew: not while it is cancelled, has auto-renew off,
 * waits for a manual reactivation, or is flagged (its own renewal waits for a person: the
 * family's seats are not bought on for a base whose renewal may never come). Its renewal brings
 * the add-ons' jobs back.
 */
export function addOnsRenew(main: Chain): boolean {
  return (
    main.status !== 'cancelled' &&
    main.autoRenew &&
    !main.needsReactivation &&
    main.flagged === null
  );
}

/** When an add-on renews, as its main chain governs it (addOnsRenew). */
export function governedNextRenewalAt(main: Chain, addOn: Chain): number | null {
  return addOnsRenew(main) ? addOn.nextRenewalAt : null;
}
