// The `orders` queue: a placed order becomes a chain (customer, first order, renewal schedule);
// a cancelled one is cancelled at the provider and stops renewing.
import { type Job, UnrecoverableError } from 'bullmq';
import { cancelChain, markAddOnsCancelled } from '../src/chains/cancel.js';
import { chainIdOf } from '../src/chains/keys.js';
import { claimProviderForNewChain } from '../src/chains/provider-binding.js';
import {
  type Chain,
  type HistoryEntry,
  type Intent,
  type NewChain,
  newChainRecord,
} from '../src/chains/records.js';
import type { OrderResponse } from '../src/client/provisioning-client.js';
import { withNextRenewalAt } from '../src/domain/renewal.js';
import { ConfigError, RefusalError } from '../src/errors.js';
import {
  type EventJobData,
  eventJobData,
  eventSchemas,
  type OrderCancelledData,
  type OrderPlacedData,
} from '../src/intake/events.js';
import { chainOfEvent, withChainLock } from './chain-lock.js';
import type { WorkerDeps } from './deps.js';
import { describeTerm, sendIntent } from './intents.js';
import { checkLateOrder, LATE_ORDER_CHECK, settleLateOrderCheck } from './late-orders.js';
import {
  ensureFamilyRenewalJobs,
  ensureRenewalJob,
  prepareRenewal,
  schedulesRenewals,
} from './renewals.js';

/**
 * Jobs of this queue are webhook events (data: `eventJobData`, name: `eventJobName`), and the
 * checks for orders made after their chain was cancelled (late-orders.ts).
 */
export const schema = eventJobData;

function causeOf(job: Job, data: EventJobData, orderId?: string) {
  return { webhookId: data.webhookId, jobId: job.id ?? '', ...(orderId ? { orderId } : {}) };
}

/** The first order's params, fixed by the event, so a retry sends exactly the same request. */
function firstOrderIntent(deps: WorkerDeps, ev: OrderPlacedData, jobId: string | null): Intent {
  const { order, customer } = ev;
  const external = deps.provisioning.variant === 'external';
  return {
    kind: 'first_order',
    // External first orders have no start date: createFirstOrder starts at once.
    method: external ? 'createFirstOrder' : 'createOrder',
    orderId: order.id,
    params: {
      customer: customer.id,
      id: order.id,
      product: order.product,
      licenses: order.licenses,
      duration: order.duration,
      ...(!external && order.startsAt !== undefined ? { startsAt: order.startsAt } : {}),
    },
    jobId,
  };
}

/**
 * How a provider says a customer id is taken: the embedded core's words, or a database's about
 * its customers (not about a user's email, which is another refusal).
 */
const CUSTOMER_EXISTS = /customer\b.*already exists|(duplicate key|unique constraint).*customer/i;

/**
 * Creates the customer at the provider unless the workers already did (or found it). The
 * caller marks it known once the chain that records this is saved: a retry after a failed
 * first order creates it again (the same params answer the stored customer) and still records
 * its history entry.
 */
async function ensureCustomer(deps: WorkerDeps, ev: OrderPlacedData): Promise<HistoryEntry[]> {
  const { customer } = ev;
  if (await deps.chains.isCustomerKnown(customer.id)) return [];
  let detail = `customer ${customer.id} created`;
  try {
    await deps.provisioning.createCustomer({
      id: customer.id,
      name: customer.name,
      admin: {
        email: customer.admin.email,
        ...(customer.admin.phone !== undefined ? { phone: customer.admin.phone } : {}),
        ...(customer.admin.displayName !== undefined
          ? { displayName: customer.admin.displayName }
          : {}),
      },
    });
  } catch (error) {
    // The provider knows this customer with other details (created before the workers ran), or
    // refuses a repeated id as a database does (a remote whose creation is not idempotent): it
    // exists, which is all a first order needs.
    if (!(error instanceof RefusalError && CUSTOMER_EXISTS.test(error.message))) throw error;
    detail = `customer ${customer.id} already existed at the provider (${error.message})`;
  }
  return [{ at: deps.clock.now(), event: 'customer.created', detail, cause: {} }];
}

function newChain(
  deps: WorkerDeps,
  ev: OrderPlacedData,
  order: OrderResponse,
  now: number,
): NewChain {
  const chain = newChainRecord({
    id: chainIdOf(ev.order.id),
    order: ev.order.id,
    customer: ev.customer.id,
    product: order.product,
    duration: ev.order.duration,
    status: order.expiresAt <= now ? 'expired' : 'active',
    autoRenew: ev.autoRenew ?? deps.settings.autoRenewDefault,
    payment: 'ok',
    licenses: order.licenses,
    nextLicenses: order.licenses,
    term: { orderId: ev.order.id, count: 1, startsAt: order.startsAt, expiresAt: order.expiresAt },
    intent: null,
    nextRenewalAt: null,
    createdAt: now,
    updatedAt: now,
  });
  return withNextRenewalAt(chain, now, deps.settings.leadDays);
}

async function placeOrder(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  data: EventJobData,
) {
  const ev = eventSchemas['order.placed'].parse(data.data);
  const chainId = chainIdOf(ev.order.id);
  return withChainLock(deps.chains, job, jobToken, chainId, async ({ chain, token }) => {
    if (chain) {
      // Placed before (a retry after the chain was recorded): only the customer's mark and the
      // schedule may be missing. The mark is the chain's customer's: a replay naming another
      // customer created none, and its mark would spare that customer's first order the
      // createCustomer it needs.
      await deps.chains.markCustomerKnown(chain.customer);
      if (schedulesRenewals(chain)) {
        await ensureRenewalJob(deps.queues.renewals, chain, deps.clock);
      }
      await noteNothingToDo(
        deps,
        job,
        data,
        { chain, token },
        {
          event: 'order.placed.ignored',
          detail: `order ${ev.order.id} was placed already: nothing changed${placedDifferently(chain, ev)}`,
        },
      );
      return `already placed: ${ev.order.id}`;
    }
    // Before the provider hears of it: the chains of a Redis are one account's.
    await claimProviderForNewChain(deps.chains.redis, deps.settings.provider).catch((error) => {
      throw error instanceof ConfigError ? new UnrecoverableError(error.message) : error;
    });
    const customerEntries = await ensureCustomer(deps, ev);
    const intent = firstOrderIntent(deps, ev, job.id ?? null);
    let order: OrderResponse;
    try {
      order = await sendIntent(deps.provisioning, intent);
    } catch (error) {
      if (error instanceof RefusalError) {
        throw new UnrecoverableError(
          `the provider refused first order ${ev.order.id}: ${error.message}`,
        );
      }
      throw error;
    }
    const now = deps.clock.now();
    const cause = causeOf(job, data, ev.order.id);
    const saved = await deps.chains.save({
      chainId,
      token,
      previous: null,
      next: newChain(deps, ev, order, now),
      history: [
        ...customerEntries.map((e) => ({ ...e, cause: causeOf(job, data) })),
        {
          at: now,
          event: 'order.placed',
          detail: `first order ${ev.order.id}: ${describeTerm(order)}`,
          cause,
        },
      ],
      orderIds: [ev.order.id],
      release: false,
    });
    // Counted once the order is recorded: a retry finds the chain and counts nothing.
    deps.metrics.orders.inc({ kind: 'first' });
    if (customerEntries.length > 0) await deps.chains.markCustomerKnown(ev.customer.id);
    await ensureRenewalJob(deps.queues.renewals, saved, deps.clock, {
      prepared: prepareRenewal(deps, saved, { stored: true }),
    });
    return `placed: ${ev.order.id}`;
  });
}

async function cancelOrder(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  data: EventJobData,
) {
  const ev: OrderCancelledData = eventSchemas['order.cancelled'].parse(data.data);
  const chainId = await chainOfEvent(deps.chains, data.type, ev.order, 'own');
  return withChainLock(deps.chains, job, jobToken, chainId, async ({ chain, token }) => {
    if (!chain) throw new UnrecoverableError(`order.cancelled names an unknown order: ${ev.order}`);
    const now = deps.clock.now();
    if (chain.status === 'cancelled') {
      // This job's earlier attempt may have saved the cancel and failed before the jobs went:
      // its retry removes them (reconcile leaves cancelled chains alone).
      await ensureFamilyRenewalJobs(deps.queues.renewals, deps.chains, chain, deps.clock);
      await markAddOnsCancelled(
        deps.chains,
        await deps.chains.getMany(chain.addOns),
        now,
        causeOf(job, data, ev.order),
      );
      await noteNothingToDo(
        deps,
        job,
        data,
        { chain, token },
        {
          event: 'order.cancelled.ignored',
          detail: `order ${chain.order} was cancelled already: nothing changed`,
        },
      );
      return `already cancelled: ${chain.order}`;
    }
    const saved = await cancelChain({
      chains: deps.chains,
      provisioning: deps.provisioning,
      held: { chain, token },
      now,
      cause: causeOf(job, data, ev.order),
      reason: `order.cancelled for ${ev.order}`,
      lateCheck: (orderId, made) =>
        settleLateOrderCheck(deps.queues.orders, deps.clock, { chainId, orderId, made }),
    });
    await ensureFamilyRenewalJobs(deps.queues.renewals, deps.chains, saved, deps.clock);
    return `cancelled: ${chain.order}`;
  });
}

/**
 * Records on the chain an event that found nothing to do, with its webhook id as the cause, as
 * every event's effect is recorded: unless entries of this delivery are there already (a retry
 * of the job that placed or cancelled the order, or of this one after its entry was saved).
 */
async function noteNothingToDo(
  deps: WorkerDeps,
  job: Job,
  data: EventJobData,
  held: { chain: Chain; token: string },
  entry: Pick<HistoryEntry, 'event' | 'detail'>,
): Promise<void> {
  const history = await deps.chains.history(held.chain.id);
  if (history.some((h) => h.cause.webhookId === data.webhookId)) return;
  await deps.chains.recordEntry(held, {
    at: deps.clock.now(),
    ...entry,
    cause: causeOf(job, data, held.chain.order),
  });
}

/** What a repeated order.placed says otherwise than its chain, none of which is applied. */
function placedDifferently(chain: Chain, ev: OrderPlacedData): string {
  const differences = [
    ev.customer.id !== chain.customer && `customer ${ev.customer.id}, not ${chain.customer}`,
    ev.order.product !== chain.product && `product ${ev.order.product}, not ${chain.product}`,
    ev.order.duration !== chain.duration && `duration ${ev.order.duration}, not ${chain.duration}`,
  ].filter((d) => d !== false);
  return differences.length === 0
    ? ''
    : ` (this event names ${differences.join(', ')}: not applied)`;
}

export function makeProcessor(deps: WorkerDeps) {
  return async function processOrderEvent(job: Job, jobToken?: string): Promise<string> {
    if (job.name.startsWith(LATE_ORDER_CHECK)) return checkLateOrder(deps, job, jobToken);
    const data = eventJobData.parse(job.data);
    switch (data.type) {
      case 'order.placed':
        return placeOrder(deps, job, jobToken, data);
      case 'order.cancelled':
        return cancelOrder(deps, job, jobToken, data);
      default:
        throw new UnrecoverableError(`the orders queue does not handle ${data.type} events`);
    }
  };
}
