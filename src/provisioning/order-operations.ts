// The order operations of the core: first orders, renewals, partials, and status changes.
import { firstTerm, planRenewalTerm, type RenewalTermPlan } from '../domain/order-terms.js';
import { formatRenewalRefusal } from '../domain/renewal-window.js';
import { NotFoundError, RefusalError, TransientError } from '../errors.js';
import { fingerprint } from './fingerprint.js';
import type { ChainRecord, CustomerRecord, OrderRecord, OrderStatus, Partner } from './records.js';
import {
  type CreateFirstOrderParams,
  type CreateOrderParams,
  type CreateRenewalOrderParams,
  MAX_EPOCH_SECONDS,
  type OrderIdParams,
} from './schemas.js';
import { type CompanionWrite, type ProvisioningStore, StatusCode } from './store.js';
import { orderView } from './views.js';

/** The order a plan writes, as a companion write sees it (before the store allocates its id). */
export type PlannedOrder = Pick<
  OrderRecord,
  'remoteId' | 'product' | 'licenses' | 'startsAt' | 'expiresAt'
>;

/** Builds the write that commits with the planned order (embedded mode; see CompanionWrite). */
export type Companion = (order: PlannedOrder) => CompanionWrite;

/**
 * How a write ended: created; recorded (created with its companion, whose caller planned the
 * order and needs only its id); a replay; or nothing written (the companion refused).
 */
export type WriteOutcome =
  | { kind: 'created'; record: OrderRecord }
  | { kind: 'exists'; record: OrderRecord }
  | { kind: 'recorded'; id: string }
  | { kind: 'companion_refused'; code: number };

/** How often an order write re-plans when a concurrent renewal moved its chain on. */
const MAX_CHAIN_RETRIES = 5;

export function makeOrderOperations(deps: {
  store: ProvisioningStore;
  /** Now for the partner (epoch seconds), from the Clock. */
  now: (partner: Partner) => number;
}) {
  const { store, now } = deps;

  /** The stored order when `id` was created before with the same params (a safe retry). */
  function replayOf(existing: OrderRecord | null, print: string, id: string) {
    if (!existing) return null;
    if (existing.fingerprint !== print) {
      throw new RefusalError('id_conflict', `order ${id} already exists with other params`);
    }
    return existing;
  }

  function requireCustomer(customer: CustomerRecord | null, id: string): CustomerRecord {
    if (!customer) throw new NotFoundError('customer_not_found', `customer not found: ${id}`);
    return customer;
  }

  /** The chain that `parent` starts, refusing unknown, non-first and cancelled orders. */
  function requireChain(
    ctx: { chain: ChainRecord | null; parentOrder: OrderRecord | null },
    parent: string,
  ): { chain: ChainRecord; parentOrder: OrderRecord } {
    if (!ctx.parentOrder) throw new NotFoundError('order_not_found', `order not found: ${parent}`);
    if (!ctx.chain) {
      throw new RefusalError(
        'not_first_order',
        ctx.parentOrder.parent
          ? `order ${parent} is not a first order: its chain starts at ${ctx.parentOrder.parent}`
          : `order ${parent} is a partial order and starts no chain`,
      );
    }
    if (ctx.parentOrder.status === 'cancelled') {
      throw new RefusalError('order_cancelled', `order ${parent} is cancelled`);
    }
    return { chain: ctx.chain, parentOrder: ctx.parentOrder };
  }

  /**
   * Refuses a term that would end after the last instant the interface can carry (epoch seconds
   * are at most 253402300799): its `expiresAt` could never be sent back, as a partial order's
   * end or a later renewal's start.
   */
  function requireTermInRange(term: { startsAt: number; expiresAt: number }, cause: string) {
    if (term.expiresAt <= MAX_EPOCH_SECONDS) return;
    throw new RefusalError(
      'term_out_of_range',
      `${cause}: the term from ${term.startsAt} would end after ${MAX_EPOCH_SECONDS} (9999-12-31T23:59:59Z)`,
    );
  }

  function refuseRenewal(plan: Exclude<RenewalTermPlan, { kind: 'term' }>, parent: string): never {
    if (plan.reason === 'window') {
      throw new RefusalError('renewal_window', formatRenewalRefusal(plan), { parent });
    }
    throw new RefusalError(
      'renewal_overlap',
      `renewal refused: startsAt ${plan.startsAt} is before the end of the current term of ${parent} (${plan.currentExpiresAt})`,
      { parent },
    );
  }

  /**
   * Writes the order (with `companion`'s write, when given); a concurrent change of its chain
   * makes `attempt` plan again from fresh state.
   */
  async function writeOrder(
    partner: Partner,
    attempt: () => Promise<
      | { done: OrderRecord }
      | {
          record: Omit<OrderRecord, 'id'>;
          chain: ChainRecord | null;
          plannedFromCount: number;
          instanceRule: 'keep' | 'external';
        }
    >,
    companion?: Companion,
  ): Promise<WriteOutcome> {
    for (let i = 0; i < MAX_CHAIN_RETRIES; i += 1) {
      const plan = await attempt();
      if ('done' in plan) return { kind: 'exists', record: plan.done };
      const result = await store.insertOrder(partner, plan, companion?.(plan.record));
      if (result.kind === 'companion_refused' || result.kind === 'recorded') return result;
      if (result.kind === 'parent_cancelled') {
        throw new RefusalError('order_cancelled', `order ${plan.chain?.parent} is cancelled`);
      }
      if (result.kind === 'customer_missing') {
        throw new NotFoundError(
          'customer_not_found',
          `customer not found: ${plan.record.customerRemoteId}`,
        );
      }
      if (result.kind === 'created') return result;
      if (result.kind === 'exists') {
        if (result.record.fingerprint !== plan.record.fingerprint) {
          throw new RefusalError(
            'id_conflict',
            `order ${plan.record.remoteId} already exists with other params`,
          );
        }
        return result;
      }
    }
    // Contention, not a rule: the same request succeeds once the chain settles (503, retried).
    throw new TransientError('chain_busy', 'the chain changed concurrently too often; retry');
  }

  function newOrder(
    fields: Pick<
      OrderRecord,
      | 'remoteId'
      | 'product'
      | 'licenses'
      | 'duration'
      | 'count'
      | 'startsAt'
      | 'expiresAt'
      | 'parent'
      | 'fingerprint'
    >,
    customer: CustomerRecord,
    createdAt: number,
    instance: OrderRecord['instance'],
  ): Omit<OrderRecord, 'id'> {
    return {
      ...fields,
      customer: String(customer.id),
      customerRemoteId: customer.remoteId,
      instance,
      createdAt,
      status: 'active',
    };
  }

  function newChain(
    order: Omit<OrderRecord, 'id'>,
    term: ReturnType<typeof firstTerm>,
  ): ChainRecord {
    return {
      parent: order.remoteId,
      customerRemoteId: order.customerRemoteId,
      product: order.product,
      duration: order.duration ?? 'monthly',
      anchor: term.anchor,
      anchorTerm: term.anchorTerm,
      count: term.count,
      startsAt: term.startsAt,
      expiresAt: term.expiresAt,
      licenses: order.licenses,
      orders: [order.remoteId],
    };
  }

  /** A renewal's order and the chain after it, or the refusal of the plan. */
  function renewalOf(input: {
    partner: Partner;
    chain: ChainRecord;
    parentOrder: OrderRecord;
    customer: CustomerRecord;
    id: string;
    licenses: number;
    requestedStartsAt?: number | undefined;
    print: string;
    at: number;
  }) {
    const { chain } = input;
    const plan = planRenewalTerm({
      chain,
      now: input.at,
      windowDays: input.partner.renewalWindowDays,
      requestedStartsAt: input.requestedStartsAt,
    });
    if (plan.kind === 'refused') refuseRenewal(plan, chain.parent);
    requireTermInRange(plan, `renewal refused for ${chain.parent}`);
    const record = newOrder(
      {
        remoteId: input.id,
        product: chain.product,
        licenses: input.licenses,
        duration: chain.duration,
        count: plan.count,
        startsAt: plan.startsAt,
        expiresAt: plan.expiresAt,
        parent: chain.parent,
        fingerprint: input.print,
      },
      input.customer,
      input.at,
      input.parentOrder.instance,
    );
    const next: ChainRecord = {
      ...chain,
      anchor: plan.anchor,
      anchorTerm: plan.anchorTerm,
      count: plan.count,
      startsAt: plan.startsAt,
      expiresAt: plan.expiresAt,
      licenses: input.licenses,
      orders: [...chain.orders, input.id],
    };
    return { record, chain: next, plannedFromCount: chain.count, instanceRule: 'keep' as const };
  }

  /** A first order: it starts its own chain, anchored at its start. */
  function firstOrderPlan(input: {
    p: { id: string; product: string; licenses: number };
    duration: 'monthly' | 'yearly';
    startsAt: number;
    customer: CustomerRecord;
    at: number;
    print: string;
    instance: OrderRecord['instance'];
    instanceRule: 'keep' | 'external';
  }) {
    const { p } = input;
    const term = firstTerm({ startsAt: input.startsAt, duration: input.duration });
    requireTermInRange(term, 'params.startsAt');
    const record = newOrder(
      {
        remoteId: p.id,
        product: p.product,
        licenses: p.licenses,
        duration: input.duration,
        count: term.count,
        startsAt: term.startsAt,
        expiresAt: term.expiresAt,
        parent: p.id,
        fingerprint: input.print,
      },
      input.customer,
      input.at,
      input.instance,
    );
    return {
      record,
      chain: newChain(record, term),
      plannedFromCount: 0,
      instanceRule: input.instanceRule,
    };
  }

  /** The record a write without a companion made or found (only companions refuse or record). */
  function writtenRecord(outcome: WriteOutcome): OrderRecord {
    if (!('record' in outcome)) throw new Error(`a write without companion ended ${outcome.kind}`);
    return outcome.record;
  }

  function createOrderWith(partner: Partner, p: CreateOrderParams, companion?: Companion) {
    const print = fingerprint('createOrder', p);
    return writeOrder(
      partner,
      async () => {
        const ctx = await store.loadOrderContext(partner, {
          order: p.id,
          customer: p.customer,
          chain: p.parent,
        });
        const replay = replayOf(ctx.order, print, p.id);
        if (replay) return { done: replay };
        const customer = requireCustomer(ctx.customer, p.customer);
        const at = now(partner);

        if (p.parent !== undefined) {
          const { chain, parentOrder } = requireChain(ctx, p.parent);
          if (chain.customerRemoteId !== p.customer) {
            throw new RefusalError(
              'parent_mismatch',
              `order ${p.parent} belongs to another customer`,
            );
          }
          if (chain.product !== p.product || chain.duration !== p.duration) {
            throw new RefusalError(
              'parent_mismatch',
              `order ${p.id} must have the product and duration of its parent ${p.parent} (${chain.product}, ${chain.duration}), got ${p.product}, ${p.duration}`,
            );
          }
          return renewalOf({
            partner,
            chain,
            parentOrder,
            customer,
            id: p.id,
            licenses: p.licenses,
            requestedStartsAt: p.startsAt,
            print,
            at,
          });
        }

        if (p.duration === undefined) {
          // Partial order: its own dates, no term, no chain (the schema guarantees both dates).
          const record = newOrder(
            {
              remoteId: p.id,
              product: p.product,
              licenses: p.licenses,
              duration: null,
              count: 1,
              startsAt: p.startsAt ?? at,
              expiresAt: p.expiresAt ?? at,
              parent: null,
              fingerprint: print,
            },
            customer,
            at,
            null,
          );
          return { record, chain: null, plannedFromCount: 0, instanceRule: 'keep' as const };
        }

        return firstOrderPlan({
          p,
          duration: p.duration,
          startsAt: p.startsAt ?? at,
          customer,
          at,
          print,
          // Marketplace instances belong to the customer from its creation.
          instance: customer.instance,
          instanceRule: 'keep',
        });
      },
      companion,
    );
  }

  async function createOrder(partner: Partner, p: CreateOrderParams) {
    return orderView(writtenRecord(await createOrderWith(partner, p)), partner.variant);
  }

  async function createFirstOrder(partner: Partner, p: CreateFirstOrderParams) {
    const print = fingerprint('createFirstOrder', p);
    const order = await writeOrder(partner, async () => {
      const ctx = await store.loadOrderContext(partner, { order: p.id, customer: p.customer });
      const replay = replayOf(ctx.order, print, p.id);
      if (replay) return { done: replay };
      const customer = requireCustomer(ctx.customer, p.customer);
      const at = now(partner);
      // The customer's instance is created by its first createFirstOrder, atomically in the script.
      return firstOrderPlan({
        p,
        duration: p.duration,
        startsAt: at,
        customer,
        at,
        print,
        instance: null,
        instanceRule: 'external',
      });
    });
    return orderView(writtenRecord(order), partner.variant);
  }

  function createRenewalOrderWith(
    partner: Partner,
    p: CreateRenewalOrderParams,
    companion?: Companion,
  ) {
    const print = fingerprint('createRenewalOrder', p);
    return writeOrder(
      partner,
      async () => {
        const ctx = await store.loadOrderContext(partner, { order: p.id, chain: p.parent });
        const replay = replayOf(ctx.order, print, p.id);
        if (replay) return { done: replay };
        const { chain, parentOrder } = requireChain(ctx, p.parent);
        const customer = requireCustomer(
          await store.getCustomer(partner, chain.customerRemoteId),
          chain.customerRemoteId,
        );
        return renewalOf({
          partner,
          chain,
          parentOrder,
          customer,
          id: p.id,
          licenses: p.licenses ?? chain.licenses,
          print,
          at: now(partner),
        });
      },
      companion,
    );
  }

  async function createRenewalOrder(partner: Partner, p: CreateRenewalOrderParams) {
    return orderView(writtenRecord(await createRenewalOrderWith(partner, p)), partner.variant);
  }

  /** Marketplace: the order named. External: the whole chain, named by its first order. */
  async function changeStatus(partner: Partner, p: OrderIdParams, status: OrderStatus) {
    const scope = partner.variant === 'external' ? 'chain' : 'order';
    const code = await store.setOrderStatus(partner, p.id, status, scope);
    switch (code) {
      case StatusCode.Done:
        return true;
      case StatusCode.OrderMissing:
        throw new NotFoundError('order_not_found', `order not found: ${p.id}`);
      case StatusCode.OrderCancelled:
        throw new RefusalError('order_cancelled', `order ${p.id} is cancelled`);
      case StatusCode.NotChainParent: {
        const order = await store.getOrder(partner, p.id);
        throw new RefusalError(
          'not_first_order',
          order?.parent
            ? `order ${p.id} is not a first order: the external variant takes the first order's id (${order.parent})`
            : `order ${p.id} is not a first order`,
        );
      }
    }
  }

  return {
    createOrder,
    createFirstOrder,
    createRenewalOrder,
    createOrderWith,
    createRenewalOrderWith,
    changeStatus,
  };
}
