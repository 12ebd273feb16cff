// The chains in a Redis name orders of one provider account: the embedded core's partner
// PARTNER_NAME, or the remote service. A start acting for another would find none of them.
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
 * Records it, or answers whom the chains already stored were made with: a Redis without chains
 * takes a new one (a first start under another name, nothing ordered yet), in one step, so two
 * starts with different settings never both pass.
 */
const BIND = `
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
export async function bindChainsToProvider(
  redis: RedisClient,
  settings: Pick<Settings, 'remote' | 'PARTNER_NAME'>,
): Promise<void> {
  const wanted = providerOf(settings);
  const bound = (await redis.eval(BIND, 2, PROVIDER_KEY, indexKeys.all, wanted)) as string | null;
  if (bound === null) return;
  throw new ConfigError('provider_changed', refusal(bound, settings), {
    setting:
      bound.startsWith('embedded:') && !settings.remote ? 'PARTNER_NAME' : 'PROVISIONING_URL',
  });
}

function refusal(bound: string, settings: Pick<Settings, 'remote' | 'PARTNER_NAME'>): string {
  const madeWith =
    bound === 'remote'
      ? 'the remote provider (PROVISIONING_URL)'
      : `the embedded core's partner ${JSON.stringify(bound.slice('embedded:'.length))}`;
  const now = settings.remote
    ? 'PROVISIONING_URL is set now'
    : `PARTNER_NAME=${settings.PARTNER_NAME} now${bound === 'remote' ? ' (embedded mode)' : ''}`;
  const fix =
    bound === 'remote'
      ? 'set PROVISIONING_URL again'
      : `set PARTNER_NAME=${bound.slice('embedded:'.length)}${settings.remote ? ' and unset PROVISIONING_URL' : ''}`;
  return `the chains in this Redis were made with ${madeWith}, but ${now}: that account has none of their orders, so every renewal, cancel and suspension would be refused; ${fix}, or use another Redis`;
}
