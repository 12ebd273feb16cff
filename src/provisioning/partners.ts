// Partner accounts: API keys are random, shown once, and stored only as an HMAC.
import { createHmac, randomBytes } from 'node:crypto';
import { RefusalError } from '../errors.js';
import type { Partner } from './records.js';
import type { Variant } from './schemas.js';
import type { ProvisioningStore } from './store.js';

export const DEFAULT_RENEWAL_WINDOW_DAYS = 15;

/** A keyed hash, not a password hash: keys are 256 random bits, so one HMAC per request is enough. */
export function hashApiKey(secret: string, apiKey: string): string {
  return createHmac('sha256', secret).update(apiKey).digest('hex');
}

export function generateApiKey(): string {
  return randomBytes(32).toString('base64url');
}

export interface PartnerDirectory {
  create(input: {
    name: string;
    variant: Variant;
    renewalWindowDays?: number | undefined;
    now: number;
  }): Promise<{ partner: Partner; apiKey: string }>;
  /**
   * The partner for this name, created (with a key nobody sees) when missing, and with the
   * renewal window asked for: an existing partner's window is changed to it, unless
   * `keepWindow` (a start that may yet fail checks the partner first and sets its window once
   * it runs).
   */
  ensure(input: {
    name: string;
    variant: Variant;
    renewalWindowDays: number;
    now: number;
    keepWindow?: boolean;
  }): Promise<Partner>;
  /** Changes a partner's renewal window ("the limit can be changed on request"). */
  setRenewalWindow(
    name: string,
    renewalWindowDays: number,
  ): Promise<{ before: number; partner: Partner }>;
  /** The partner of this name; refused (partner_not_found) when there is none. */
  named(name: string): Promise<Partner>;
  authenticate(apiKey: string): Promise<Partner | null>;
  list(): Promise<Partner[]>;
}

/**
 * Partner accounts, their keys hashed with `keyHashSecret`, asked for only when a key is hashed
 * (the embedded runtime generates it then, when none is kept).
 */
export function makePartnerDirectory(
  store: ProvisioningStore,
  keyHashSecret: () => Promise<string>,
): PartnerDirectory {
  const create: PartnerDirectory['create'] = async ({ name, variant, renewalWindowDays, now }) => {
    const apiKey = generateApiKey();
    const partner = await store.createPartner(
      {
        name,
        variant,
        renewalWindowDays: renewalWindowDays ?? DEFAULT_RENEWAL_WINDOW_DAYS,
        createdAt: now,
      },
      hashApiKey(await keyHashSecret(), apiKey),
    );
    if (partner === 'name_taken') {
      throw new RefusalError('partner_exists', `partner already exists: ${name}`, { name });
    }
    return { partner, apiKey };
  };

  const named: PartnerDirectory['named'] = async (name) => {
    const found = await store.findPartnerByName(name);
    if (!found) throw new RefusalError('partner_not_found', `no partner named ${name}`, { name });
    return found;
  };
  return {
    create,
    async ensure(input) {
      /** The partner of that name, held to the variant and window asked for. */
      const adopt = async (existing: Partner) => {
        if (existing.variant !== input.variant) {
          throw new RefusalError(
            'partner_variant_mismatch',
            `partner ${input.name} exists with variant ${existing.variant}, not ${input.variant}`,
            { name: input.name, existing: existing.variant },
          );
        }
        if (input.keepWindow || existing.renewalWindowDays === input.renewalWindowDays) {
          return existing;
        }
        return store.setPartnerRenewalWindow(existing, input.renewalWindowDays);
      };
      const existing = await store.findPartnerByName(input.name);
      if (existing) return adopt(existing);
      try {
        return (await create(input)).partner;
      } catch (error) {
        // Another process created it between our read and our write: theirs, on our terms.
        const raced = await store.findPartnerByName(input.name);
        if (raced) return adopt(raced);
        throw error;
      }
    },
    named,
    async setRenewalWindow(name, renewalWindowDays) {
      const existing = await named(name);
      const partner = await store.setPartnerRenewalWindow(existing, renewalWindowDays);
      return { before: existing.renewalWindowDays, partner };
    },
    authenticate: async (apiKey) =>
      store.findPartnerByKeyHash(hashApiKey(await keyHashSecret(), apiKey)),
    list: () => store.listPartners(),
  };
}
