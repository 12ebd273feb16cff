// The provisioning operations: plain async functions over the store, for the calling partner.
//
// The HTTP transport and the workers' in-process client both call `invoke`, so every caller
// gets the same validation, the same rules and the same response shapes.
import type { z } from 'zod';
import type { Clock } from '../clock.js';
import { NotFoundError, RefusalError } from '../errors.js';
import type { Logger } from '../logger.js';
import { describeIssues } from '../validation.js';
import { fingerprint } from './fingerprint.js';
import { type Companion, makeOrderOperations, type WriteOutcome } from './order-operations.js';
import { hashPassword } from './passwords.js';
import type { CustomerRecord, Partner } from './records.js';
import {
  type CreateCustomerParams,
  type CreateUserParams,
  externalSchemas,
  type GetUserParams,
  marketplaceSchemas,
  type OrderIdParams,
  type ResetPasswordParams,
  type UpdateUserParams,
  type Variant,
} from './schemas.js';
import type { ProvisioningStore } from './store.js';
import { customerView, orderView, userCreateView, userReadView } from './views.js';

export interface ProvisioningDeps {
  store: ProvisioningStore;
  clock: Clock;
  brand: string;
  /**
   * Where onboarding links point: `{publicUrl()}/onboarding/{instanceId}`. Asked each time: with
   * `PORT=0` the server's port is known only once it listens.
   */
  publicUrl: () => string;
  /** Logs each onboarding email recorded in the outbox (DESIGN §3: "a Redis stream, logged"). */
  log: Logger;
}

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
      `${deps.publicUrl()}/onboarding/`,
      record.createdAt,
    );
    if (result.kind === 'exists' && result.record.fingerprint !== record.fingerprint) {
      throw new RefusalError('id_conflict', `customer ${p.id} already exists with other params`);
    }
    const view = customerView(result.record, partner.variant);
    if (result.kind === 'created' && 'url' in view) {
      deps.log.info(
        { partner: partner.name, customer: p.id, to: p.admin.email, url: view.url },
        'onboarding email recorded in the outbox',
      );
    }
    return view;
  }

  const orders = makeOrderOperations({ store, now });
  const { createOrder, createFirstOrder, createRenewalOrder, changeStatus } = orders;

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
    const handler = handlerOf(partner, method);
    return handler(partner, parseParams(partner, method, params) as never);
  }

  /**
   * A renewal order (createOrder, createRenewalOrder) written with `companion`'s write in one
   * script, as `invoke` would make it otherwise: the workers' in-process client uses this to
   * commit a renewal and their record of it together (CompanionWrite).
   */
  async function createRecorded(
    partner: Partner,
    method: 'createOrder' | 'createRenewalOrder',
    params: unknown,
    companion: Companion,
  ): Promise<
    | { kind: 'recorded'; id: string }
    | { kind: 'exists'; order: unknown }
    | { kind: 'companion_refused'; code: number }
  > {
    handlerOf(partner, method);
    const parsed = parseParams(partner, method, params) as never;
    const outcome: WriteOutcome =
      method === 'createOrder'
        ? await orders.createOrderWith(partner, parsed, companion)
        : await orders.createRenewalOrderWith(partner, parsed, companion);
    if (outcome.kind === 'exists') {
      return { kind: 'exists', order: orderView(outcome.record, partner.variant) };
    }
    if (outcome.kind === 'created') throw new Error('a write with a companion ended created');
    return outcome;
  }

  /** The handler of `method` when the partner's variant offers it; otherwise the refusal. */
  function handlerOf(partner: Partner, method: string) {
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
    return handler;
  }

  function parseParams(partner: Partner, method: string, params: unknown): unknown {
    const schema = (schemas[partner.variant] as Record<string, z.ZodType>)[method] as z.ZodType;
    const parsed = schema.safeParse(params ?? {}, { reportInput: true });
    if (!parsed.success) {
      throw new RefusalError('invalid_params', describeIssues(parsed.error, 'params'), { method });
    }
    return parsed.data;
  }

  /**
   * The provider's own staff reactivating a suspended order by hand, which the external variant
   * offers partners no call for (no unsuspendOrder): external, the whole chain of its first
   * order, as its suspension was. Not part of the partner interface: `billing orders reactivate`.
   */
  async function reactivateOrder(partner: Partner, id: unknown) {
    const p = parseParams(partner, 'cancelOrder', { id }) as OrderIdParams;
    await changeStatus(partner, p, 'active');
    const record = await store.getOrder(partner, p.id);
    if (!record) throw new NotFoundError('order_not_found', `order not found: ${p.id}`);
    // The interface's order, with the status its staff sees.
    return { ...orderView(record, partner.variant), status: record.status };
  }

  return {
    invoke,
    createRecorded,
    reactivateOrder,
    methods: { marketplace: Object.keys(marketplace), external: Object.keys(external) },
  };
}
