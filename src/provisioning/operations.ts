// The provisioning operations: plain async functions over the store, for the calling partner.
//
// The HTTP transport and the workers' in-process client both call `invoke`, so every caller
// gets the same validation, the same rules and the same response shapes.
import type { z } from 'zod';
import type { Clock } from '../clock.js';
import { firstTerm, planRenewalTerm, type RenewalTermPlan } from '../domain/order-terms.js';
import { formatRenewalRefusal } from '../domain/renewal-window.js';
import { NotFoundError, RefusalError } from '../errors.js';
import { describeIssues } from '../validation.js';
import { fingerprint } from './fingerprint.js';
import { hashPassword } from './passwords.js';
import type { ChainRecord, CustomerRecord, OrderRecord, OrderStatus, Partner } from './records.js';
import {
  type CreateCustomerParams,
  type CreateFirstOrderParams,
  type CreateOrderParams,
  type CreateRenewalOrderParams,
  type CreateUserParams,
  externalSchemas,
  type GetUserParams,
  marketplaceSchemas,
  type OrderIdParams,
  type ResetPasswordParams,
  type UpdateUserParams,
  type Variant,
} from './schemas.js';
import { type ProvisioningStore, StatusCode } from './store.js';
import { customerView, orderView, userCreateView, userReadView } from './views.js';

export interface ProvisioningDeps {
  store: ProvisioningStore;
  clock: Clock;
  brand: string;
  /** Where onboarding links point: `{publicUrl}/onboarding/{instanceId}`. */
  publicUrl: string;
}

/** How often an order write re-plans when a concurrent renewal moved its chain on. */
const MAX_CHAIN_RETRIES = 5;

const emailKey = (email: string) => email.toLowerCase();

export type ProvisioningCore = ReturnType<typeof makeProvisioningCore>;

export function makeProvisioningCore(deps: ProvisioningDeps) {
  const { store, clock } = deps;
  const schemas = {
    marketplace: marketplaceSchemas(deps.brand),
    external: externalSchemas(deps.brand),
  } as const;
  const now = (partner: Partner) => clock.now(String(partner.id));

  // --- users --------------------------------------------------------------------------------

  async function createUser(partner: Partner, p: CreateUserParams) {
    const customer = await store.getCustomerByInstance(partner, p.instance);
    if (!customer)
      throw new NotFoundError('instance_not_found', `instance not found: ${p.instance}`);
    const user = await store.createUser(
      partner,
      emailKey(p.email),
      {
        instance: customer.instance ?? p.instance,
        email: p.email,
        displayName: p.displayName ?? p.email.slice(0, p.email.indexOf('@')),
        createdAt: now(partner),
        // The customer's administrator contact becomes the instance's admin user.
        isAdmin: emailKey(customer.admin.email) === emailKey(p.email),
        isSysAdmin: false,
        settings: [1, 1, 0, 0],
        apps: [1, 1, 1],
        notificationReminder: 1,
      },
      await hashPassword(p.password),
    );
    if (user === 'duplicate') {
      throw new RefusalError(
        'duplicate_email',
        'duplicate key value violates unique constraint "users_email"',
      );
    }
    return userCreateView(user);
  }

  async function getUserByEmail(partner: Partner, p: GetUserParams) {
    const user = await store.getUser(partner, emailKey(p.email));
    if (!user) throw new NotFoundError('user_not_found', `user not found: ${p.email}`);
    return userReadView(user.record, user.isActive);
  }

  async function updateUserByEmail(partner: Partner, p: UpdateUserParams) {
    if (!(await store.setUserField(partner, emailKey(p.email), 'active', p.isActive ? '1' : '0'))) {
      throw new NotFoundError('user_not_found', `user not found: ${p.email}`);
    }
    return true;
  }

  async function resetPasswordByEmail(partner: Partner, p: ResetPasswordParams) {
    const hash = await hashPassword(p.password);
    if (!(await store.setUserField(partner, emailKey(p.email), 'password', hash))) {
      throw new NotFoundError('user_not_found', `user not found: ${p.email}`);
    }
    return true;
  }

  // --- customers ----------------------------------------------------------------------------

  async function createCustomer(partner: Partner, p: CreateCustomerParams) {
    const record: Omit<CustomerRecord, 'id'> = {
      remoteId: p.id,
      name: p.name,
      admin: p.admin,
      partner: partner.variant === 'marketplace' ? partner.name : partner.id,
      createdAt: now(partner),
      isActive: true,
      instance: null,
      fingerprint: fingerprint('createCustomer', p),
    };
    const result = await store.createCustomer(
      partner,
      record,
      `${deps.publicUrl}/onboarding/`,
      record.createdAt,
    );
    if (result.kind === 'exists' && result.record.fingerprint !== record.fingerprint) {
      throw new RefusalError('id_conflict', `customer ${p.id} already exists with other params`);
    }
    return customerView(result.record, partner.variant);
  }

  // --- orders -------------------------------------------------------------------------------

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

  /** Writes the order; a concurrent change of its chain makes `attempt` plan again from fresh state. */
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
  ): Promise<OrderRecord> {
    for (let i = 0; i < MAX_CHAIN_RETRIES; i += 1) {
      const plan = await attempt();
      if ('done' in plan) return plan.done;
      const result = await store.insertOrder(partner, plan);
      if (result.kind === 'customer_missing') {
        throw new NotFoundError(
          'customer_not_found',
          `customer not found: ${plan.record.customerRemoteId}`,
        );
      }
      if (result.kind === 'created') return result.record;
      if (result.kind === 'exists') {
        if (result.record.fingerprint !== plan.record.fingerprint) {
          throw new RefusalError(
            'id_conflict',
            `order ${plan.record.remoteId} already exists with other params`,
          );
        }
        return result.record;
      }
    }
    throw new RefusalError('chain_busy', 'the chain changed concurrently too often; retry');
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

  async function createOrder(partner: Partner, p: CreateOrderParams) {
    const print = fingerprint('createOrder', p);
    const order = await writeOrder(partner, async () => {
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

      const term = firstTerm({ startsAt: p.startsAt ?? at, duration: p.duration });
      const record = newOrder(
        {
          remoteId: p.id,
          product: p.product,
          licenses: p.licenses,
          duration: p.duration,
          count: term.count,
          startsAt: term.startsAt,
          expiresAt: term.expiresAt,
          parent: p.id,
          fingerprint: print,
        },
        customer,
        at,
        customer.instance,
      );
      return {
        record,
        chain: newChain(record, term),
        plannedFromCount: 0,
        instanceRule: 'keep' as const,
      };
    });
    return orderView(order, partner.variant);
  }

  async function createFirstOrder(partner: Partner, p: CreateFirstOrderParams) {
    const print = fingerprint('createFirstOrder', p);
    const order = await writeOrder(partner, async () => {
      const ctx = await store.loadOrderContext(partner, { order: p.id, customer: p.customer });
      const replay = replayOf(ctx.order, print, p.id);
      if (replay) return { done: replay };
      const customer = requireCustomer(ctx.customer, p.customer);
      const at = now(partner);
      const term = firstTerm({ startsAt: at, duration: p.duration });
      const record = newOrder(
        {
          remoteId: p.id,
          product: p.product,
          licenses: p.licenses,
          duration: p.duration,
          count: term.count,
          startsAt: term.startsAt,
          expiresAt: term.expiresAt,
          parent: p.id,
          fingerprint: print,
        },
        customer,
        at,
        null,
      );
      // The customer's instance is created by its first createFirstOrder, atomically in the script.
      return {
        record,
        chain: newChain(record, term),
        plannedFromCount: 0,
        instanceRule: 'external' as const,
      };
    });
    return orderView(order, partner.variant);
  }

  async function createRenewalOrder(partner: Partner, p: CreateRenewalOrderParams) {
    const print = fingerprint('createRenewalOrder', p);
    const order = await writeOrder(partner, async () => {
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
    });
    return orderView(order, partner.variant);
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

  const marketplace = {
    createUser,
    updateUserByEmail,
    resetPasswordByEmail,
    getUserByEmail,
    createCustomer,
    createOrder,
    cancelOrder: (partner: Partner, p: OrderIdParams) => changeStatus(partner, p, 'cancelled'),
    suspendOrder: (partner: Partner, p: OrderIdParams) => changeStatus(partner, p, 'suspended'),
    unsuspendOrder: (partner: Partner, p: OrderIdParams) => changeStatus(partner, p, 'active'),
  };
  const external = {
    createUser,
    updateUserByEmail,
    resetPasswordByEmail,
    getUserByEmail,
    createCustomer,
    createFirstOrder,
    createRenewalOrder,
    cancelOrder: marketplace.cancelOrder,
    suspendOrder: marketplace.suspendOrder,
  };
  const handlers: Record<
    Variant,
    Record<string, (partner: Partner, params: never) => Promise<unknown>>
  > = {
    marketplace,
    external,
  };

  /**
   * Runs one operation for a partner: `method` must be one its variant offers, `params` are
   * validated by that operation's schema. Refusals throw RefusalError with the caller's message.
   */
  async function invoke(partner: Partner, method: string, params: unknown): Promise<unknown> {
    const variantSchemas: Record<string, z.ZodType> = schemas[partner.variant];
    const handler = Object.hasOwn(handlers[partner.variant], method)
      ? handlers[partner.variant][method]
      : undefined;
    const schema = Object.hasOwn(variantSchemas, method) ? variantSchemas[method] : undefined;
    if (!handler || !schema) {
      const other: Variant = partner.variant === 'marketplace' ? 'external' : 'marketplace';
      throw new RefusalError(
        'unknown_method',
        Object.hasOwn(handlers[other], method)
          ? `method ${method} is not offered in the ${partner.variant} variant`
          : `unknown method: ${JSON.stringify(method)}`,
      );
    }
    const parsed = schema.safeParse(params ?? {}, { reportInput: true });
    if (!parsed.success) {
      throw new RefusalError('invalid_params', describeIssues(parsed.error, 'params'), { method });
    }
    return handler(partner, parsed.data as never);
  }

  return {
    invoke,
    methods: { marketplace: Object.keys(marketplace), external: Object.keys(external) },
  };
}
