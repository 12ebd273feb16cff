// The chains in a Redis name orders of one provider account: the embedded core's partner
// PARTNER_NAME, or the remote service. A process acting for another would find none of them.
import type { Settings } from '../../config/settings.js';
import { ConfigError } from '../errors.js';
import type { RedisClient } from '../redis/connection.js';
import { WORKER_KEY_ROOT } from '../redis/key-space.js';
import { indexKeys } from './keys.js';

/** STRING: whom the chains' orders were made with, as `providerOf` words it. */
export const PROVIDER_KEY = `${WORKER_KEY_ROOT}:provider`;

/** Whom a process with these settings acts for. */
export function providerOf(settings: Pick<Settings, 'remote' | 'PARTNER_NAME'>): string {
  return settings.remote ? 'remote' : `embedded:${settings.PARTNER_NAME}`;
}

/**
 * At a start, read only: whom the stored chains were made with, when that is another account.
 * Nothing is written while there are no chains, so a start that fails, or stops before it made
 * any, never speaks for the deployment. Chains stored before the binding existed (an upgrade)
 * are taken to be this start's.
 */
const AT_START = `
local bound = redis.call('GET', KEYS[1])
if bound == ARGV[1] or redis.call('ZCARD', KEYS[2]) == 0 then return false end
if not bound then
  redis.call('SET', KEYS[1], ARGV[1])
  return false
end
return bound
`;

/**
 * Before a first order: records whom the chains are made with, or answers whom they already
 * are. A Redis without chains takes a new account (its first order was refused, say).
 */
const BEFORE_FIRST_ORDER = `
local bound = redis.call('GET', KEYS[1])
if bound == ARGV[1] then return false end
if bound and redis.call('ZCARD', KEYS[2]) > 0 then return bound end
redis.call('SET', KEYS[1], ARGV[1])
return false
`;

/**
 * Refuses a start that would act for another provider account than the one the stored chains'
 * orders live at: every renewal, cancel, seat purchase and suspension would be refused there
 * ("order not found"), or made for customers the other account never had.
 */
export async function checkProviderAtStart(
  redis: RedisClient,
  settings: Pick<Settings, 'remote' | 'PARTNER_NAME'>,
): Promise<void> {
  await refusedUnlessBound(redis, AT_START, settings);
}

/**
 * Binds the chains to `provider` before the first order of a new chain is sent, so the account
 * they were made with is recorded by the process that made them; a ConfigError when they were
 * made with another (two processes with different settings, the other started first).
 */
export async function claimProviderForNewChain(
  redis: RedisClient,
  settings: Pick<Settings, 'remote' | 'PARTNER_NAME'>,
): Promise<void> {
  await refusedUnlessBound(redis, BEFORE_FIRST_ORDER, settings);
}

/** Runs one of the scripts above; a ConfigError naming the other account the chains are bound to. */
async function refusedUnlessBound(
  redis: RedisClient,
  script: string,
  settings: Pick<Settings, 'remote' | 'PARTNER_NAME'>,
): Promise<void> {
  const keys = [PROVIDER_KEY, indexKeys.all];
  const bound = (await redis.eval(script, keys.length, ...keys, providerOf(settings))) as
    | string
    | null;
  if (bound === null) return;
  throw new ConfigError('provider_changed', refusal(bound, settings), {
    setting: settings.remote || bound === 'remote' ? 'PROVISIONING_URL' : 'PARTNER_NAME',
  });
}

function refusal(bound: string, settings: Pick<Settings, 'remote' | 'PARTNER_NAME'>): string {
  const partner = bound.slice('embedded:'.length);
  const madeWith =
    bound === 'remote'
      ? 'the remote provider (PROVISIONING_URL)'
      : `the embedded core's partner ${JSON.stringify(partner)}`;
  const now = settings.remote
    ? 'PROVISIONING_URL is set now'
    : `PARTNER_NAME=${settings.PARTNER_NAME} now${bound === 'remote' ? ' (embedded mode)' : ''}`;
  const fix =
    bound === 'remote'
      ? 'set PROVISIONING_URL again'
      : `set PARTNER_NAME=${partner}${settings.remote ? ' and unset PROVISIONING_URL' : ''}`;
  return `the chains in this Redis were made with ${madeWith}, but ${now}: that account has none of their orders, so every renewal, cancel and suspension would be refused; ${fix}, or use another Redis`;
}
