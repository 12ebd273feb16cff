// What an operator can do to chains, shared by the ops API and the CLI.
import type { Queue } from 'bullmq';
import { z } from 'zod';
import { settleLateOrderCheck } from '../../jobs/late-orders.js';
import { ensureSuspensionJob } from '../../jobs/payment-signals.js';
import { ensureFamilyRenewalJobs } from '../../jobs/renewals.js';
import { cancelChain, markAddOnsCancelled } from '../chains/cancel.js';
import { governedNextRenewalAt, mainChainsOf } from '../chains/family.js';
import { chainIdOf } from '../chains/keys.js';
import type { Cause, Chain, ChainWithHistory } from '../chains/records.js';
import type { ChainStore, DueCursor } from '../chains/store.js';
import { type ChainView, chainView, type ShownChain, shownNextRenewalAt } from '../chains/view.js';
import type { ProvisioningClient } from '../client/provisioning-client.js';
import type { Clock } from '../clock.js';
import { SECONDS_PER_DAY } from '../domain/periods.js';
import { withNextRenewalAt } from '../domain/renewal.js';
import { InvalidRequestError, NotFoundError, RefusalError } from '../errors.js';
import { formatInstant } from '../format.js';
import { withOperatorLock } from './operator-lock.js';

export interface ChainOperationsDeps {
  chains: ChainStore;
  renewals: Queue;
  /** A reactivation confirmed while a newer payment is overdue schedules its suspension. */
  paymentSignals: Queue;
  clock: Clock;
  leadDays: number;
  /** The variant the workers drive: only external chains are reactivated by hand. */
  variant: 'marketplace' | 'external';
  /** Needed only to cancel. */
  provisioning?: ProvisioningClient;
  /** Needed only to cancel: where a cancel leaves its check for a late order (late-orders). */
  orders?: Queue;
}

export interface UpcomingRenewal {
  order: string;
  customer: string;
  dueAt: number;
  expiresAt: number;
}

export type ChainOperations = ReturnType<typeof makeChainOperations>;

/**
 * An add-on as its main chain governs it: auto-renew, payment, suspension and cancellation are
 * the main chain's (and so is whether it renews at all), and the main chain holds the add-on's
 * next license count.
 */
function asGovernedBy(main: Chain, addOn: Chain): Chain {
  // An add-on that ended, or was cancelled by itself, stays so under a suspended main chain:
  // nothing of it is in force to suspend, or to reactivate.
  const over = addOn.status === 'expired' || addOn.status === 'cancelled';
  const governed = main.status === 'cancelled' || (main.status === 'suspended' && !over);
  return {
    ...addOn,
    status: governed ? main.status : addOn.status,
    autoRenew: main.autoRenew,
    payment: main.payment,
    needsReactivation: addOn.status === 'cancelled' ? false : main.needsReactivation,
    // One cancelled by itself carries nothing into a next term (the main chain's share for it
    // stays recorded until the next seat event allots the total again); under a cancelled main
    // chain it keeps its count, as the main chain does.
    nextLicenses:
      addOn.status === 'cancelled' && main.status !== 'cancelled'
        ? 0
        : (main.addOnNextLicenses[addOn.id] ?? addOn.nextLicenses),
    nextRenewalAt: governedNextRenewalAt(main, addOn),
  };
}

/** An add-on read with its history, shown as `main` governs it, with the counts it keeps. */
function governedView(main: Chain, addOn: ChainWithHistory): ShownChain {
  return {
    ...addOn,
    chain: asGovernedBy(main, addOn.chain),
    kept: main.addOnLicensesUntil[addOn.chain.id] ?? [],
  };
}

/** `GET /ops/renewals` answers at most this many. */
export const UPCOMING_LIMIT = 1000;

/** The most main chains one answer of a customer's chains carries (each with its history). */
export const CUSTOMER_CHAINS_LIMIT = 100;

/**
 * Where the next page of upcoming renewals starts, as API callers and the CLI pass it back
 * (`next`, then `after`): the due time and chain id of the last chain the page read. Opaque to
 * them; it stays good however the renewals change in between.
 */
export function dueCursorText(cursor: DueCursor): string {
  return `${cursor.dueAt}.${cursor.chainId}`;
}

export const dueCursorFromText = z
  .string()
  .regex(/^\d{1,15}\.c[A-Za-z0-9_-]{22}$/, 'must be the `next` of an earlier answer')
  .transform((text): DueCursor => {
    const [dueAt, chainId] = text.split('.') as [string, string];
    return { dueAt: Number(dueAt), chainId };
  });

function upcomingRenewal(chain: Chain): UpcomingRenewal {
  return {
    order: chain.order,
    customer: chain.customer,
    dueAt: chain.nextRenewalAt as number,
    expiresAt: chain.term.expiresAt,
  };
}

export function makeChainOperations(deps: ChainOperationsDeps) {
  const { chains, clock } = deps;

  /**
   * The due chains that still renew as their views show them: an add-on renews only while its
   * main chain renews it, and an expired chain only once it becomes payable.
   */
  async function stillRenewing(due: Chain[], now: number): Promise<Chain[]> {
    const mains = await mainChainsOf(chains, due);
    return due.filter((c) => {
      const main = c.mainChain ? mains.get(c.mainChain) : undefined;
      return shownNextRenewalAt(main ? asGovernedBy(main, c) : c, now) !== null;
    });
  }

  /**
   * The chain as it is now, with its add-ons, each read together with its history. An add-on
   * shown alone (by its own order) renews, pays and stands as its main chain governs it, as it
   * shows in its main chain's view: its own record keeps the values its main chain overrides.
   * `mainOrder` is the order that governs it: its main chain's for an add-on, else its own.
   */
  async function governedRead(chain: Chain): Promise<{ view: ChainView; mainOrder: string }> {
    const [read = { chain, history: [] }] = await chains.getManyWithHistory([chain.id]);
    const governing = read.chain.mainChain === null ? null : await chains.get(read.chain.mainChain);
    const main = governing ? governedView(governing, read) : read;
    const addOns = await chains.getManyWithHistory(main.chain.addOns);
    const view = chainView(
      main,
      addOns.map((a) => governedView(main.chain, a)),
      clock.now(),
    );
    return { view, mainOrder: governing?.order ?? read.chain.order };
  }

  async function view(chain: Chain): Promise<ChainView> {
    return (await governedRead(chain)).view;
  }

  async function lastEventOf(chain: Chain): Promise<string | undefined> {
    const [read] = await chains.getManyWithHistory([chain.id]);
    return read?.history.at(-1)?.event;
  }

  async function find(order: string): Promise<Chain> {
    const chain = await chains.getByOrder(order);
    if (!chain) throw new NotFoundError('chain_not_found', `no chain has an order ${order}`);
    return chain;
  }

  /**
   * Changes a chain and makes its renewal job, and its add-ons' (which it governs), match the
   * new state, both under its lock: two quick changes (off, then on) cannot meet in between,
   * where the first one's job update would undo the second's. `work` returns the chain it was
   * given when there is nothing to change. `isRepeat`: whether a request that changed nothing
   * repeats one that made the change, which is how an operator finishes one whose job update
   * failed (a 503, retried).
   */
  async function change(
    order: string,
    work: (held: { chain: Chain; token: string }) => Promise<Chain>,
    { isRepeat }: { isRepeat?: (chain: Chain) => Promise<boolean> } = {},
  ) {
    const found = await find(order);
    const saved = await withOperatorLock(chains, found.id, async (held) => {
      const changed = await work(held);
      // An operator changed the chain: a renewal that put itself off is reconsidered now. A
      // request that changed nothing (a script setting auto-renew on, again) leaves it waiting,
      // so a renewal backing off from a provider that asked for a wait spends no attempt.
      // Switching auto-renew on also gives a flagged chain's failed renewal its job back (the
      // cause fixed, README).
      await ensureFamilyRenewalJobs(deps.renewals, chains, changed, clock, {
        // A repeat reconsiders only a renewal waiting for the payment the confirmation was
        // about: one the provider's window put off since (the family's, add-ons' too) waits.
        overrideDeferral:
          changed !== held.chain || ((await isRepeat?.(changed)) ? 'payment' : false),
        restoreFlagged: !held.chain.autoRenew && changed.autoRenew,
      });
      return changed;
    });
    return view(saved);
  }

  /**
   * Auto-renew and reactivation belong to a family's main chain, which governs its add-ons (DESIGN
   * §4): set on an add-on's own record, they would only stop its renewals for good.
   */
  async function refuseAddOn(chain: Chain, what: string): Promise<void> {
    if (chain.mainChain === null) return;
    const main = await chains.get(chain.mainChain);
    const mainOrder = main?.order ?? 'its main chain';
    throw new RefusalError(
      'add_on_governed',
      `${chain.order} is an add-on of ${mainOrder}, whose ${what} governs it: name ${mainOrder}`,
    );
  }

  return {
    show: async (order: string) => view(await find(order)),

    /** The chain as `show` answers it, and the order that governs it (commands name that one). */
    showWithMainOrder: async (order: string) => governedRead(await find(order)),

    setAutoRenew: (order: string, enabled: boolean, cause: Cause) =>
      change(order, async ({ chain, token }) => {
        await refuseAddOn(chain, 'auto-renew');
        // Also when the flag would not change: a 200 would say a cancelled chain renews.
        if (chain.status === 'cancelled') {
          throw new RefusalError(
            'chain_cancelled',
            `chain ${chain.order} is cancelled: it renews no more, whatever its auto-renew`,
          );
        }
        if (chain.autoRenew === enabled) return chain;
        const now = clock.now();
        return chains.save({
          chainId: chain.id,
          token,
          previous: chain,
          next: withNextRenewalAt(
            { ...chain, autoRenew: enabled, updatedAt: now },
            now,
            deps.leadDays,
          ),
          history: [
            {
              at: now,
              event: enabled ? 'auto_renew.enabled' : 'auto_renew.disabled',
              detail: enabled ? 'auto-renewal switched on' : 'auto-renewal switched off',
              cause,
            },
          ],
          release: false,
        });
      }),

    cancel: (order: string, cause: Cause) =>
      change(order, async ({ chain, token }) => {
        if (chain.status === 'cancelled') {
          await markAddOnsCancelled(chains, await chains.getMany(chain.addOns), clock.now(), cause);
          return chain;
        }
        const { provisioning, orders } = deps;
        if (!provisioning || !orders) {
          throw new Error('cancelling a chain needs a provisioning client and the orders queue');
        }
        return cancelChain({
          chains,
          provisioning,
          held: { chain, token },
          now: clock.now(),
          cause,
          reason: 'cancelled by an operator',
          lateCheck: (orderId, made) =>
            settleLateOrderCheck(orders, clock, { chainId: chain.id, orderId, made }),
        });
      }),

    reactivated: (order: string, cause: Cause) =>
      change(
        order,
        async ({ chain, token }) => {
          await refuseAddOn(chain, 'reactivation');
          if (chain.status === 'cancelled') {
            throw new RefusalError(
              'chain_cancelled',
              `chain ${chain.order} is cancelled and cannot be reactivated`,
            );
          }
          // A payment overdue again since the one that asked for this reactivation: its grace
          // period runs on, and its suspension job (made sure of here) follows.
          const overdueFrom =
            chain.payment === 'overdue' && chain.suspendAt !== null ? chain.suspendAt : null;
          const now = clock.now();
          /** Ensured before the save, and again by a repeat: its job waits for this lock. */
          const suspendAgain = async (status: Chain['status']) => {
            if (overdueFrom === null || status !== 'active') return;
            await ensureSuspensionJob(
              deps.paymentSignals,
              chain,
              chain.overdueEpisode,
              overdueFrom,
              clock,
            );
          };
          if (chain.status !== 'suspended' && !chain.needsReactivation) {
            // Done already (a repeat, say, after an answer that was lost).
            await suspendAgain(chain.status);
            return chain;
          }
          // Being unsuspended at the provider is a marketplace payment's work, whatever variant
          // this process read (a command run with another PARTNER_VARIANT than the service's).
          if (deps.variant === 'marketplace' || chain.unsuspending) {
            throw new RefusalError(
              'not_external',
              `chain ${chain.order} is a marketplace chain: it is unsuspended at the provider when payment.received arrives, not reactivated by hand`,
            );
          }
          // Never asked for, or asked for by an earlier payment while a newer one, overdue since,
          // has had the family suspended again at the end of its grace period.
          if (chain.payment === 'overdue' && (!chain.needsReactivation || overdueFrom === null)) {
            throw new RefusalError(
              'payment_overdue',
              `chain ${chain.order} is suspended for a payment still overdue (episode ${chain.overdueEpisode}): it asks for a reactivation once paid`,
            );
          }
          const status = chain.term.expiresAt <= now ? 'expired' : 'active';
          await suspendAgain(status);
          return chains.save({
            chainId: chain.id,
            token,
            previous: chain,
            next: withNextRenewalAt(
              { ...chain, status, needsReactivation: false, suspendedOrders: null, updatedAt: now },
              now,
              deps.leadDays,
            ),
            history: [
              {
                at: now,
                event: 'chain.reactivated',
                detail:
                  overdueFrom === null || status !== 'active'
                    ? 'an operator confirmed the manual reactivation at the provider'
                    : `an operator confirmed the manual reactivation at the provider; payment is overdue again (episode ${chain.overdueEpisode}): suspended again from ${formatInstant(overdueFrom)} unless paid`,
                cause,
              },
            ],
            release: false,
          });
        },
        // Only a repeat of the confirmation itself: a chain never suspended keeps a renewal the
        // provider's window put off waiting, as any request that changes nothing does.
        { isRepeat: async (chain) => (await lastEventOf(chain)) === 'chain.reactivated' },
      ),

    /**
     * A page of the customer's main chains (their add-ons inside them), oldest first: the first
     * `CUSTOMER_CHAINS_LIMIT`, or those after the chain of the order `after`; `next` names the
     * order to pass as `after` for the page that follows, null after the last. Records are read
     * a page at a time, so a customer with thousands of chains costs what one page does.
     */
    async ofCustomer(
      customer: string,
      after?: string,
    ): Promise<{ chains: ChainView[]; next: string | null }> {
      const ids = await chains.customerChainIds(customer);
      let from = 0;
      if (after !== undefined) {
        const at = ids.indexOf(chainIdOf(after));
        if (at === -1) {
          throw new InvalidRequestError(
            `query.after: no chain of customer ${customer} has the order ${JSON.stringify(after)}`,
          );
        }
        from = at + 1;
      }
      // One main chain past the page, if any: only then is there a next page (the ids left
      // after a full page may all be add-ons, listed inside their main chains already).
      const mains: Chain[] = [];
      while (mains.length <= CUSTOMER_CHAINS_LIMIT && from < ids.length) {
        // Whole batches once the page is full too: the ids left may be many add-ons.
        const wanted = Math.max(CUSTOMER_CHAINS_LIMIT + 1 - mains.length, CUSTOMER_CHAINS_LIMIT);
        const batch = ids.slice(from, from + wanted);
        from += batch.length;
        mains.push(...(await chains.getMany(batch)).filter((c) => c.mainChain === null));
      }
      const page = mains.slice(0, CUSTOMER_CHAINS_LIMIT);
      return {
        chains: await Promise.all(page.map(view)),
        next: mains.length > CUSTOMER_CHAINS_LIMIT ? (page.at(-1)?.order ?? null) : null,
      };
    },

    /**
     * The next `UPCOMING_LIMIT` renewals that fire within `days`, earliest first, after `after`
     * (where the page before ended): and where the page after starts, null when none is left.
     * The due index also holds add-ons whose main chain no longer renews them, so it is read
     * until the page is full: dropping those from one read would hide renewals due later.
     */
    async upcoming(
      days: number,
      after?: DueCursor,
    ): Promise<{ renewals: UpcomingRenewal[]; next: DueCursor | null }> {
      const now = clock.now();
      const until = now + days * SECONDS_PER_DAY;
      const renewals: UpcomingRenewal[] = [];
      const read: Chain[] = [];
      let next = after ?? null;
      do {
        const page = await chains.dueUntil(until, UPCOMING_LIMIT, next ?? undefined);
        read.push(...page.chains);
        next = page.next;
        const renewing = new Map((await stillRenewing(page.chains, now)).map((c) => [c.id, c]));
        for (const [i, entry] of page.entries.entries()) {
          const chain = renewing.get(entry.chainId);
          if (chain) renewals.push(upcomingRenewal(chain));
          if (renewals.length < UPCOMING_LIMIT) continue;
          // Full before the page's end: the next page starts after the last renewal listed.
          if (i < page.entries.length - 1) next = entry;
          break;
        }
      } while (next !== null && renewals.length < UPCOMING_LIMIT);
      // Left by records older than the rule that keeps them out: read once, then gone.
      await chains.forgetUnlistedDue(read);
      // In the index's order, which a chain saved since it was read may have left (stable).
      renewals.sort((a, b) => a.dueAt - b.dueAt);
      return { renewals, next };
    },
  };
}
