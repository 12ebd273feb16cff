// The chain store: each chain's record, history and lock, and the indexes the ops API reads.
import { TransientError } from '../errors.js';
import type { RedisClient } from '../redis/connection.js';
import { callScript, defineScripts, readScripts, type ScriptCall } from '../redis/lua-scripts.js';
import { chainKeys, customerChainsKey, indexKeys } from './keys.js';
import {
  type Chain,
  type ChainWithHistory,
  chainRecord,
  type HistoryEntry,
  historyEntry,
  type Intent,
} from './records.js';

const scripts = readScripts(new URL('./scripts/', import.meta.url));

/** Short enough to recover from a crash; a job renews it while it works (withChainLock). */
export const LOCK_LEASE_MS = 60_000;

export type LockResult = { kind: 'held'; chain: Chain | null } | { kind: 'locked' };

/** A renewal intent prepared when its job was scheduled, from the chain at `version`. */
export interface RenewalClaim {
  version: number;
  now: number;
  /** The intent holds for any `now` in [validFrom, validUntil). */
  validFrom: number;
  validUntil: number;
  intent: Intent;
}

export type ClaimResult = LockResult | { kind: 'claimed'; chain: Chain };

/** Where a page of the due index starts: right after the chain `chainId`, read as due at `dueAt`. */
export interface DueCursor {
  dueAt: number;
  chainId: string;
}

export interface SaveInput {
  chainId: string;
  /**
   * The lock token the caller holds; null for a save that takes no lock because its caller's
   * read, decision and write are one atomic step (a prepared renewal committed with its order):
   * it is refused while any job holds the lock or an intent is pending.
   */
  token: string | null;
  /** The chain as it is now stored, or null when this write creates it. */
  previous: Chain | null;
  /** The new state; its version is set here. */
  next: Omit<Chain, 'version'>;
  history?: readonly HistoryEntry[];
  /** Order ids to map to this chain, so events and ops may name any of them. */
  orderIds?: readonly string[];
  release: boolean;
}

/**
 * A chain as stored: `<version>|<JSON without version and intent>`. The prefix lets scripts check
 * the version without decoding the JSON; the intent has a key of its own, so the renewal fast
 * path writes it without rewriting the record.
 */
function encodeChain(chain: Chain): string {
  const { version, intent: _intent, ...fields } = chain;
  return `${version}|${JSON.stringify(fields)}`;
}

/**
 * A stored chain keeps the fields this version does not know: during a rolling upgrade an older
 * worker that saves a chain a newer one wrote must not drop what the newer one keeps there (its
 * next save writes back every field it read). Fields of nested records are not kept.
 */
const storedChain = chainRecord.loose();

function decodeChain(stored: string, intentJson: string | null): Chain {
  const bar = stored.indexOf('|');
  return storedChain.parse({
    ...JSON.parse(stored.slice(bar + 1)),
    version: Number(stored.slice(0, bar)),
    intent: intentJson ? JSON.parse(intentJson) : null,
  });
}

function decodeHistory(entries: readonly string[]): HistoryEntry[] {
  return entries.map((json) => historyEntry.parse(JSON.parse(json)));
}

export class ChainStore {
  readonly leaseMs: number;
  /** Tokens whose lock a save already released, so unlock needs no round trip. */
  private readonly released = new Set<string>();

  constructor(
    readonly redis: RedisClient,
    options: { leaseMs?: number } = {},
  ) {
    this.leaseMs = options.leaseMs ?? LOCK_LEASE_MS;
    defineScripts(redis, scripts);
  }

  /** Takes the chain's lock and reads it in one round trip. */
  async lock(chainId: string, token: string, leaseMs = this.leaseMs): Promise<LockResult> {
    const keys = chainKeys(chainId);
    const reply = (await callScript(
      this.redis,
      'lockChain',
      [keys.lock, keys.chain, keys.intent],
      [token, leaseMs],
    )) as [number, string?, string?];
    return heldOrLocked(reply);
  }

  /**
   * Takes the chain's lock and, when the chain is still at `claim.version` and `claim.now` falls
   * in the claim's range, writes its intent: lock, read and intent in one round trip. Otherwise
   * it is `lock`, and the caller decides from the chain it read.
   */
  async claimRenewal(chainId: string, token: string, claim: RenewalClaim): Promise<ClaimResult> {
    const keys = chainKeys(chainId);
    const reply = (await callScript(
      this.redis,
      'claimRenewal',
      [keys.lock, keys.chain, keys.intent],
      [
        token,
        this.leaseMs,
        claim.version,
        claim.now,
        claim.validFrom,
        claim.validUntil,
        JSON.stringify(claim.intent),
      ],
    )) as [number, string?, string?];
    if (reply[0] === 2)
      return {
        kind: 'claimed',
        chain: { ...decodeChain(reply[1] ?? '', null), intent: claim.intent },
      };
    return heldOrLocked(reply);
  }

  /**
   * Calls the provider once per order, one after another, renewing the lock's lease before each
   * call, so a family with many orders never outlives the lock while the provider answers.
   */
  async eachOrderUnderLock(
    chainId: string,
    token: string,
    orderIds: readonly string[],
    call: (params: { id: string }) => Promise<unknown>,
  ): Promise<void> {
    for (const id of orderIds) {
      // A lease that lapsed is not taken again, even when free: another job may have changed the
      // chain meanwhile, and this one's calls were planned from what it read before.
      if (!(await this.renewLease(chainId, token))) {
        throw new TransientError('chain_lock_lost', `lost the lock of chain ${chainId}`, {
          chainId,
        });
      }
      await call({ id });
    }
  }

  /**
   * Renews the lease of a lock we still hold, for a job whose work outlasts one lease (a slow
   * provider). Answers false, and takes nothing, when the lock is no longer ours.
   */
  async renewLease(chainId: string, token: string): Promise<boolean> {
    return this.renewLeaseOf(chainKeys(chainId).lock, token, this.leaseMs);
  }

  async unlock(chainId: string, token: string): Promise<void> {
    if (this.released.delete(token)) return;
    await this.releaseLock(chainKeys(chainId).lock, token);
  }

  /** renewLease for any lock key (a chain's, or a task's such as the reconcile round's). */
  async renewLeaseOf(lockKey: string, token: string, leaseMs: number): Promise<boolean> {
    return (await callScript(this.redis, 'renewLease', [lockKey], [token, leaseMs])) === 1;
  }

  /** Releases any lock key if `token` still holds it. */
  async releaseLock(lockKey: string, token: string): Promise<void> {
    await callScript(this.redis, 'unlockChain', [lockKey], [token]);
  }

  /**
   * Writes the chain under its lock and returns what was stored. Throws TransientError when the
   * lock's lease ran out or another writer changed the chain: the job retries from fresh state.
   */
  async save(input: SaveInput): Promise<Chain> {
    const { write, chain } = this.saveWrite(input);
    const code = (await callScript(this.redis, 'saveChain', write.keys, write.args)) as number;
    if (code !== 0) this.refuseSave(input, code);
    this.saved(input);
    return chain;
  }

  /**
   * Saves `entry` into the chain's history, and nothing else of the chain but its `updatedAt`:
   * what happened changed none of its state (an event with nothing to do, a late order
   * cancelled). Under its lock, as any save.
   */
  async recordEntry(held: { chain: Chain; token: string }, entry: HistoryEntry): Promise<Chain> {
    const { chain, token } = held;
    return this.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: { ...chain, updatedAt: entry.at },
      history: [entry],
      release: false,
    });
  }

  /**
   * The keys and args of `save` (scripts/includes/save-chain.lua), for a script that commits the
   * save with another write (the embedded core's createOrderAndSaveChain). The caller reports
   * its outcome back: `saved` when written, `refuseSave` with the refusal code.
   */
  saveWrite(input: SaveInput): { write: ScriptCall; chain: Chain } {
    const keys = chainKeys(input.chainId);
    const expected = input.previous?.version ?? -1;
    const chain: Chain = { ...input.next, version: expected + 1 } as Chain;
    const write = {
      keys: [
        keys.lock,
        keys.chain,
        keys.intent,
        keys.history,
        indexKeys.orders,
        indexKeys.due,
        indexKeys.all,
        customerChainsKey(chain.customer),
      ],
      args: [
        input.token ?? '',
        expected,
        encodeChain(chain),
        chain.intent ? JSON.stringify(chain.intent) : '',
        input.chainId,
        listedAsDue(chain) ? chain.nextRenewalAt : '',
        chain.createdAt,
        input.release ? '1' : '0',
        JSON.stringify(input.orderIds ?? []),
        this.leaseMs,
        ...(input.history ?? []).map((entry) => JSON.stringify(entry)),
      ],
    };
    return { write, chain };
  }

  /** After a save written: a released lock needs no unlock. */
  saved(input: SaveInput): void {
    if (input.release && input.token !== null) this.released.add(input.token);
  }

  /**
   * A refused save (-1: the lock is not ours, or held by a job when the save takes none; -2: the
   * chain changed, or has a pending intent when the save takes no lock) as the job's retry.
   */
  refuseSave(input: SaveInput, code: number): never {
    const { chainId } = input;
    if (code === -1) {
      const message =
        input.token === null
          ? `chain ${input.next.order} is locked by another job`
          : `lost the lock of chain ${input.next.order}`;
      throw new TransientError('chain_lock_lost', message, { chainId });
    }
    if (code === -2) {
      throw new TransientError('chain_changed', `chain ${input.next.order} changed concurrently`, {
        chainId,
      });
    }
    throw new Error(`saveChain answered an unknown code ${code} for chain ${chainId}`);
  }

  async get(chainId: string): Promise<Chain | null> {
    return (await this.getMany([chainId]))[0] ?? null;
  }

  /** The chain that any of its order ids (first order, renewal, partial, add-on) belongs to. */
  async chainIdOfOrder(orderId: string): Promise<string | null> {
    return this.redis.hget(indexKeys.orders, orderId);
  }

  async getByOrder(orderId: string): Promise<Chain | null> {
    const chainId = await this.chainIdOfOrder(orderId);
    return chainId ? this.get(chainId) : null;
  }

  async history(chainId: string): Promise<HistoryEntry[]> {
    const entries = await this.redis.lrange(chainKeys(chainId).history, 0, -1);
    return decodeHistory(entries);
  }

  async getMany(chainIds: readonly string[]): Promise<Chain[]> {
    const stored = await this.storedMany(chainIds);
    return stored.map(([, chain, intent]) => decodeChain(chain, intent));
  }

  /**
   * getMany for a reader that must get past a record it cannot read (reconcile: one record that
   * does not parse, written by a newer version say, would otherwise stop every round there).
   */
  async getManyReadable(
    chainIds: readonly string[],
  ): Promise<{ chains: Chain[]; unreadable: { chainId: string; error: unknown }[] }> {
    const chains: Chain[] = [];
    const unreadable: { chainId: string; error: unknown }[] = [];
    for (const [chainId, chain, intent] of await this.storedMany(chainIds)) {
      try {
        chains.push(decodeChain(chain, intent));
      } catch (error) {
        unreadable.push({ chainId, error });
      }
    }
    return { chains, unreadable };
  }

  /** The stored records of those of `chainIds` that exist, in one round trip. */
  private async storedMany(
    chainIds: readonly string[],
  ): Promise<[chainId: string, chain: string, intent: string | null][]> {
    if (chainIds.length === 0) return [];
    const keys = chainIds.flatMap((id) => [chainKeys(id).chain, chainKeys(id).intent]);
    const values = await this.redis.mget(keys);
    const stored: [chainId: string, chain: string, intent: string | null][] = [];
    chainIds.forEach((chainId, i) => {
      const chain = values[2 * i];
      if (chain) stored.push([chainId, chain, values[2 * i + 1] ?? null]);
    });
    return stored;
  }

  /**
   * Chains with their histories, all read in one transaction: a view never shows a history entry
   * whose change its chain does not show yet (a reader waiting for an event sees its effect too).
   */
  async getManyWithHistory(chainIds: readonly string[]): Promise<ChainWithHistory[]> {
    if (chainIds.length === 0) return [];
    const read = this.redis.multi();
    for (const id of chainIds) {
      const keys = chainKeys(id);
      read.mget(keys.chain, keys.intent).lrange(keys.history, 0, -1);
    }
    const replies = (await read.exec()) ?? [];
    const found: ChainWithHistory[] = [];
    for (let i = 0; i < replies.length; i += 2) {
      const [chainError, values] = replies[i] ?? [];
      const [historyError, entries] = replies[i + 1] ?? [];
      if (chainError) throw chainError;
      if (historyError) throw historyError;
      const [stored, intent] = values as [string | null, string | null];
      if (!stored) continue;
      found.push({
        chain: decodeChain(stored, intent),
        history: decodeHistory(entries as string[]),
      });
    }
    return found;
  }

  /**
   * The ids of a customer's chains (add-ons too), oldest first, those created in the same second
   * in byte order of their ids: an order that holds from one page of them to the next. Two
   * round trips however many there are, and no record read.
   */
  async customerChainIds(customerId: string): Promise<string[]> {
    const ids = await this.redis.smembers(customerChainsKey(customerId));
    if (ids.length === 0) return [];
    const created = await this.redis.zmscore(indexKeys.all, ...ids);
    return ids
      .map((id, i) => ({ id, createdAt: Number(created[i] ?? 0) }))
      .sort(
        (a, b) => a.createdAt - b.createdAt || Buffer.compare(Buffer.from(a.id), Buffer.from(b.id)),
      )
      .map(({ id }) => id);
  }

  /**
   * Chains whose renewal fires at or before `until` (epoch seconds), earliest first, `limit` at
   * most, right after `after` (where the page before ended): and the cursor of the next page,
   * null after the last. Each page costs the same however deep it is, and a page that ends among
   * thousands due at the same second goes on from there, even if its last chain renewed since.
   */
  async dueUntil(
    until: number,
    limit = 1000,
    after?: DueCursor,
  ): Promise<{ chains: Chain[]; entries: DueCursor[]; next: DueCursor | null }> {
    const reply = (await callScript(
      this.redis,
      'duePage',
      [indexKeys.due],
      [until, limit, after?.dueAt ?? '', after?.chainId ?? ''],
    )) as string[];
    // Each entry as read from the index, where a page may end: its chain may have moved since.
    const entries: DueCursor[] = [];
    for (let i = 0; i < reply.length; i += 2) {
      entries.push({ chainId: reply[i] as string, dueAt: Number(reply[i + 1]) });
    }
    const next = entries.length === limit ? (entries.at(-1) ?? null) : null;
    return { chains: await this.getMany(entries.map((e) => e.chainId)), entries, next };
  }

  /**
   * Takes out of the due index the chains read from it that it no longer lists (expired,
   * flagged: their records predate that rule), unless saved since: each save writes the index.
   */
  async forgetUnlistedDue(read: readonly Chain[]): Promise<void> {
    const unlisted = read.filter((chain) => chain.nextRenewalAt !== null && !listedAsDue(chain));
    if (unlisted.length === 0) return;
    // Sent together: one write of the socket (connection.ts), one round trip.
    await Promise.all(
      unlisted.map((chain) =>
        callScript(
          this.redis,
          'forgetDue',
          [chainKeys(chain.id).chain, indexKeys.due],
          [chain.version, chain.id],
        ),
      ),
    );
  }

  /** A page of every chain id, oldest first, for reconcile. */
  async pageOfChainIds(offset: number, count: number): Promise<string[]> {
    return this.redis.zrange(indexKeys.all, String(offset), String(offset + count - 1));
  }

  async isCustomerKnown(customerId: string): Promise<boolean> {
    return (await this.redis.hexists(indexKeys.knownCustomers, customerId)) === 1;
  }

  async markCustomerKnown(customerId: string): Promise<void> {
    await this.redis.hset(indexKeys.knownCustomers, customerId, '1');
  }
}

/**
 * Whether the due index lists the chain (`GET /ops/renewals`): not one that waits for its
 * payment past its term (expired) or for a person (flagged), whose renewal time stays on the
 * record for its job but shows nowhere; thousands of late payers would otherwise be read and
 * dropped on every listing.
 */
function listedAsDue(chain: Chain): chain is Chain & { nextRenewalAt: number } {
  return chain.nextRenewalAt !== null && chain.status !== 'expired' && chain.flagged === null;
}

function heldOrLocked([held, stored, intent]: [number, string?, string?]): LockResult {
  if (held === 0) return { kind: 'locked' };
  return { kind: 'held', chain: stored ? decodeChain(stored, intent || null) : null };
}
