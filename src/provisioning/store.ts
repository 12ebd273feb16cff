// The provisioning core's Redis store: every read and atomic write the operations need.
import { randomBytes } from 'node:crypto';
import type { RedisClient } from '../redis/connection.js';
import { callScript, defineScripts, readScripts, type ScriptCall } from '../redis/lua-scripts.js';
import { partnerKeys, registryKeys } from './keys.js';
import {
  type ChainRecord,
  type CustomerRecord,
  chainRecord,
  customerRecord,
  type OrderRecord,
  type OrderStatus,
  orderRecord,
  type Partner,
  parseStored,
  partnerRecord,
  type UserRecord,
  userRecord,
} from './records.js';

const scripts = readScripts(new URL('./scripts/', import.meta.url));

/** Return codes of the scripts (see each script's header). */
export enum ScriptCode {
  Replay = 1,
  Done = 0,
  ChainMoved = -1,
  CustomerMissing = -2,
  CompanionRefused = -3,
  ParentCancelled = -4,
}

export enum StatusCode {
  Done = 0,
  OrderMissing = -1,
  OrderCancelled = -2,
  NotChainParent = -3,
}

export type WriteResult<T> = { kind: 'created'; record: T } | { kind: 'exists'; record: T };

export type OrderInsertResult =
  | WriteResult<OrderRecord>
  /** Written with its companion: only the id, since the caller planned the rest. */
  | { kind: 'recorded'; id: string }
  | { kind: 'chain_moved' }
  | { kind: 'customer_missing' }
  /** The chain's first order was cancelled after the caller planned from it. */
  | { kind: 'parent_cancelled' }
  | { kind: 'companion_refused'; code: number };

/**
 * Embedded mode: the workers' chain save (src/chains/scripts/includes/save-chain.lua) that
 * commits in the same script as an order, so the order and their record of it are written
 * together or not at all.
 */
export type CompanionWrite = ScriptCall;

export interface OrderContext {
  order: OrderRecord | null;
  customer: CustomerRecord | null;
  chain: ChainRecord | null;
  parentOrder: OrderRecord | null;
}

export class ProvisioningStore {
  constructor(readonly redis: RedisClient) {
    defineScripts(redis, scripts);
  }

  // --- partners -----------------------------------------------------------------------------

  async createPartner(
    partner: Omit<Partner, 'id'>,
    keyHash: string,
  ): Promise<Partner | 'name_taken'> {
    const [code, json] = (await callScript(
      this.redis,
      'createPartner',
      [
        registryKeys.partners,
        registryKeys.partnerNames,
        registryKeys.partnerKeys,
        registryKeys.sequences,
      ],
      [partner.name, JSON.stringify(partner), keyHash],
    )) as [number, string];
    return code === ScriptCode.Done ? parseStored(partnerRecord, json, 'partner') : 'name_taken';
  }

  /** The recorded fingerprint of the key-hash secret (src/provisioning/key-hash-guard.ts). */
  async keyHashFingerprint(): Promise<string | null> {
    return this.redis.get(registryKeys.keyHashFingerprint);
  }

  /** Records `fingerprint` unless one is recorded already; answers the one recorded. */
  async recordKeyHashFingerprint(fingerprint: string): Promise<string> {
    for (;;) {
      const set = await this.redis.set(registryKeys.keyHashFingerprint, fingerprint, 'NX');
      if (set === 'OK') return fingerprint;
      const recorded = await this.redis.get(registryKeys.keyHashFingerprint);
      if (recorded !== null) return recorded;
      // Deleted between the two commands (an operator starting over): ask again.
    }
  }

  async hasPartners(): Promise<boolean> {
    return (await this.redis.hlen(registryKeys.partners)) > 0;
  }

  async findPartnerByKeyHash(keyHash: string): Promise<Partner | null> {
    const json = (await callScript(
      this.redis,
      'findPartnerByKey',
      [registryKeys.partnerKeys, registryKeys.partners],
      [keyHash],
    )) as string | null;
    return json ? parseStored(partnerRecord, json, 'partner') : null;
  }

  async findPartnerByName(name: string): Promise<Partner | null> {
    const id = await this.redis.hget(registryKeys.partnerNames, name);
    if (id === null) return null;
    const json = await this.redis.hget(registryKeys.partners, id);
    return json ? parseStored(partnerRecord, json, 'partner') : null;
  }

  /** Changes a partner's renewal window ("changed on request", spec: Renewal window). */
  async setPartnerRenewalWindow(partner: Partner, renewalWindowDays: number): Promise<Partner> {
    const changed = partnerRecord.parse({ ...partner, renewalWindowDays });
    await this.redis.hset(registryKeys.partners, String(partner.id), JSON.stringify(changed));
    return changed;
  }

  async listPartners(): Promise<Partner[]> {
    const all = await this.redis.hvals(registryKeys.partners);
    return all
      .map((json) => parseStored(partnerRecord, json, 'partner'))
      .sort((a, b) => a.id - b.id);
  }

  // --- customers ----------------------------------------------------------------------------

  async createCustomer(
    partner: Partner,
    record: Omit<CustomerRecord, 'id'>,
    onboardingBaseUrl: string,
    now: number,
  ): Promise<WriteResult<CustomerRecord>> {
    const keys = partnerKeys(partner.id);
    const marketplace = partner.variant === 'marketplace';
    const [code, json] = (await callScript(
      this.redis,
      'createCustomer',
      [keys.customers, keys.sequences, keys.instances, registryKeys.outbox],
      [
        record.remoteId,
        JSON.stringify({ ...record, id: 0 }),
        marketplace ? 'string' : 'integer',
        marketplace ? '1' : '0',
        marketplace ? onboardingBaseUrl : '',
        partner.id,
        now,
        `inst-${randomBytes(9).toString('base64url')}`,
      ],
    )) as [number, string];
    const stored = parseStored(customerRecord, json, 'customer');
    return { kind: code === ScriptCode.Replay ? 'exists' : 'created', record: stored };
  }

  async getCustomer(partner: Partner, remoteId: string): Promise<CustomerRecord | null> {
    const json = await this.redis.hget(partnerKeys(partner.id).customers, remoteId);
    return json ? parseStored(customerRecord, json, 'customer') : null;
  }

  async getCustomerByInstance(
    partner: Partner,
    instance: string | number,
  ): Promise<CustomerRecord | null> {
    const keys = partnerKeys(partner.id);
    const remoteId = await this.redis.hget(keys.instances, String(instance));
    return remoteId === null ? null : this.getCustomer(partner, remoteId);
  }

  // --- orders -------------------------------------------------------------------------------

  /** Everything an order operation decides from, in one round trip. */
  async loadOrderContext(
    partner: Partner,
    ids: { order: string; customer?: string | undefined; chain?: string | undefined },
  ): Promise<OrderContext> {
    const keys = partnerKeys(partner.id);
    const [order, customer, chain, parentOrder] = (await callScript(
      this.redis,
      'loadOrderContext',
      [keys.orders, keys.customers, keys.chains],
      [ids.order, ids.customer ?? '', ids.chain ?? ''],
    )) as [string, string, string, string];
    return {
      order: order ? parseStored(orderRecord, order, 'order') : null,
      customer: customer ? parseStored(customerRecord, customer, 'customer') : null,
      chain: chain ? parseStored(chainRecord, chain, 'chain') : null,
      parentOrder: parentOrder ? parseStored(orderRecord, parentOrder, 'order') : null,
    };
  }

  /**
   * Stores an order, and the chain state it leads to, unless its caller id exists or the chain
   * moved on since `plannedFromCount` was read. With a `companion`, that write commits in the
   * same script, and nothing is written unless both may be.
   */
  async insertOrder(
    partner: Partner,
    input: {
      record: Omit<OrderRecord, 'id'>;
      chain: ChainRecord | null;
      plannedFromCount: number;
      instanceRule: 'keep' | 'external';
    },
    companion?: CompanionWrite,
  ): Promise<OrderInsertResult> {
    const keys = partnerKeys(partner.id);
    const { record, chain } = input;
    const orderKeys = [keys.orders, keys.chains, keys.customers, keys.sequences, keys.instances];
    const orderArgs = [
      record.remoteId,
      JSON.stringify(record),
      chain ? chain.parent : '',
      input.plannedFromCount,
      chain ? JSON.stringify(chain) : '',
      record.customerRemoteId,
      input.instanceRule,
    ];
    const [code, json] = (await (companion
      ? callScript(
          this.redis,
          'createOrderAndSaveChain',
          [...orderKeys, ...companion.keys],
          [...orderArgs, ...companion.args],
        )
      : callScript(this.redis, 'createOrder', orderKeys, orderArgs))) as [number, string];
    switch (code) {
      case ScriptCode.ChainMoved:
        return { kind: 'chain_moved' };
      case ScriptCode.CustomerMissing:
        return { kind: 'customer_missing' };
      case ScriptCode.ParentCancelled:
        return { kind: 'parent_cancelled' };
      case ScriptCode.CompanionRefused:
        return { kind: 'companion_refused', code: Number(json) };
      case ScriptCode.Done:
        if (companion) return { kind: 'recorded', id: json };
        return { kind: 'created', record: parseStored(orderRecord, json, 'order') };
      default:
        return { kind: 'exists', record: parseStored(orderRecord, json, 'order') };
    }
  }

  async getOrder(partner: Partner, remoteId: string): Promise<OrderRecord | null> {
    const json = await this.redis.hget(partnerKeys(partner.id).orders, remoteId);
    return json ? parseStored(orderRecord, json, 'order') : null;
  }

  async getChain(partner: Partner, parent: string): Promise<ChainRecord | null> {
    const json = await this.redis.hget(partnerKeys(partner.id).chains, parent);
    return json ? parseStored(chainRecord, json, 'chain') : null;
  }

  async setOrderStatus(
    partner: Partner,
    remoteId: string,
    status: OrderStatus,
    scope: 'order' | 'chain',
  ): Promise<StatusCode> {
    const keys = partnerKeys(partner.id);
    return (await callScript(
      this.redis,
      'setOrderStatus',
      [keys.orders, keys.chains],
      [remoteId, status, scope],
    )) as StatusCode;
  }

  // --- users --------------------------------------------------------------------------------

  async createUser(
    partner: Partner,
    emailKey: string,
    record: Omit<
      UserRecord,
      | 'id'
      | 'rootFiles'
      | 'trashFiles'
      | 'inbox'
      | 'spam'
      | 'sent'
      | 'trashEmail'
      | 'drafts'
      | 'mainCalendar'
    >,
    passwordHash: string,
  ): Promise<UserRecord | 'duplicate'> {
    const keys = partnerKeys(partner.id);
    const [code, json] = (await callScript(
      this.redis,
      'createUser',
      [keys.users, keys.usersActive, keys.usersPassword, keys.sequences],
      [emailKey, JSON.stringify(record), passwordHash],
    )) as [number, string];
    return code === ScriptCode.Done ? parseStored(userRecord, json, 'user') : 'duplicate';
  }

  async getUser(
    partner: Partner,
    emailKey: string,
  ): Promise<{ record: UserRecord; isActive: boolean } | null> {
    const keys = partnerKeys(partner.id);
    const [[e1, json], [e2, active]] = ((await this.redis
      .pipeline()
      .hget(keys.users, emailKey)
      .hget(keys.usersActive, emailKey)
      .exec()) ?? []) as [[Error | null, string | null], [Error | null, string | null]];
    if (e1 || e2) throw e1 ?? e2;
    if (!json) return null;
    return { record: parseStored(userRecord, json, 'user'), isActive: active === '1' };
  }

  /** Users are never deleted, so an existence check followed by a write cannot race. */
  async setUserField(
    partner: Partner,
    emailKey: string,
    field: 'active' | 'password',
    value: string,
  ): Promise<boolean> {
    const keys = partnerKeys(partner.id);
    if (!(await this.redis.hexists(keys.users, emailKey))) return false;
    await this.redis.hset(
      field === 'active' ? keys.usersActive : keys.usersPassword,
      emailKey,
      value,
    );
    return true;
  }
}
