// Which orders of a chain a cancel, suspension or unsuspension applies to.
import type { Chain } from './records.js';

/**
 * The order a change at the provider (suspend, cancel) names for the chain's order `orderId`:
 * external changes name the chain's first order and apply to every order of it.
 */
export function orderToChange(
  chain: Chain,
  orderId: string,
  variant: 'marketplace' | 'external',
): string {
  return variant === 'external' ? chain.order : orderId;
}

/**
 * External: the whole chain, named by its first order (the provider applies the change to every
 * order of it). Marketplace: each order still in force or ahead: the term in force, a next term
 * already ordered, and partials. Orders that already ended are left as they are.
 */
export function ordersInForce(
  chain: Chain,
  variant: 'marketplace' | 'external',
  now: number,
): string[] {
  if (variant === 'external') return [chain.order];
  const terms = [chain.previousTerm, chain.term].filter((t) => t !== null && t.expiresAt > now);
  const partials = chain.partials.filter((p) => p.expiresAt > now);
  return [...new Set([...terms.map((t) => t?.orderId ?? ''), ...partials.map((p) => p.orderId)])];
}

/** The same for a main chain and its add-on chains together. */
export function familyOrdersInForce(
  main: Chain,
  addOns: readonly Chain[],
  variant: 'marketplace' | 'external',
  now: number,
): string[] {
  const live = addOns.filter((a) => a.status !== 'cancelled' && a.term.expiresAt > now);
  return [main, ...live].flatMap((chain) => ordersInForce(chain, variant, now));
}

/**
 * Whether any order of the family is in force or ahead, by its own terms, whatever the variant
 * names to change them (external names a whole chain by its first order, ended or not).
 */
export function familyHasOrdersInForce(main: Chain, addOns: readonly Chain[], now: number) {
  return familyOrdersInForce(main, addOns, 'marketplace', now).length > 0;
}
