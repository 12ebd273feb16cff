// Operators change chains under the same lock as jobs; a request waits briefly, then gives up (409).
import { randomUUID } from 'node:crypto';
import { setTimeout as wait } from 'node:timers/promises';
import { whileHeld } from '../chains/lease.js';
import type { Chain } from '../chains/records.js';
import type { ChainStore } from '../chains/store.js';
import { NotFoundError, RefusalError } from '../errors.js';
import { isRedisTimeout } from '../redis/connection.js';

const ATTEMPTS = 20;
const PAUSE_MS = 150;

export async function withOperatorLock(
  chains: ChainStore,
  chainId: string,
  work: (held: { chain: Chain; token: string }) => Promise<Chain>,
): Promise<Chain> {
  const token = `ops/${randomUUID()}`;
  for (let attempt = 0; attempt < ATTEMPTS; attempt += 1) {
    const lock = await chains.lock(chainId, token).catch((error: unknown) => {
      // A lock command that timed out may still run once Redis answers: the unlock, sent on
      // the same connection, runs after it, so a request that gave up (503) does not hold the
      // chain for a whole lease, refusing the operator's retry as busy.
      if (isRedisTimeout(error)) chains.unlock(chainId, token).catch(() => {});
      throw error;
    });
    if (lock.kind === 'held') {
      const { chain } = lock;
      return whileHeld(chains, chainId, token, () => {
        if (!chain) throw new NotFoundError('chain_not_found', `chain ${chainId} does not exist`);
        return work({ chain, token });
      });
    }
    await wait(PAUSE_MS);
  }
  throw new RefusalError(
    'chain_busy',
    'a job or another request is changing this chain right now; try again in a moment',
  );
}
