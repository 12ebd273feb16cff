// An order made while its family is suspended for non-payment joins the suspension as soon as it
// is made: a seat purchase, or a renewal decided before and sent after the suspension.
import { RefusalError } from '../src/errors.js';
import type { WorkerDeps } from './deps.js';

/**
 * Suspends the order `id`, made for its family while suspended: null once suspended, or the
 * provider's refusal, logged. The order is made and must be recorded: a refusal thrown here
 * would leave its intent for every later job of the chain to meet again (and a renewal without
 * its next term's job). Refused, the order stays active, which its record says with the
 * provider's words (suspensionRefusedOnArrival), for a person.
 */
export async function suspendOnArrival(
  deps: Pick<WorkerDeps, 'provisioning' | 'log'>,
  id: string,
  what: 'purchase' | 'renewal',
): Promise<string | null> {
  try {
    await deps.provisioning.suspendOrder({ id });
    return null;
  } catch (error) {
    if (!(error instanceof RefusalError)) throw error;
    deps.log.error(
      { order: id, err: error },
      `the provider refused to suspend a ${what} made while its family is suspended`,
    );
    return error.message;
  }
}
