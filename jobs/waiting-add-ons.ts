// The external variant's waiting add-on: createFirstOrder starts at once, so an add-on needed on
// a later date is bought by a delayed job on that date (one per chain, in `seat-changes`).
import type { Job } from 'bullmq';
import { z } from 'zod';
import { renewsNoMore } from '../src/chains/expiry.js';
import { newAddOnRecord } from '../src/chains/family.js';
import type { Chain } from '../src/chains/records.js';
import { delayUntil } from '../src/clock.js';
import { addTerms } from '../src/domain/periods.js';
import { TransientError } from '../src/errors.js';
import { defaultJobOptions, neverRunsAgain, removedUnlessRunning } from '../src/queues.js';
import { waitForOtherJob } from './chain-lock.js';
import type { WorkerDeps } from './deps.js';

/**
 * A waiting add-on of `chain` as a seat plan counts it: an add-on of its licenses from its day,
 * renewing as the chain's add-ons do. Never stored: its record is made when it is bought.
 */
export function waitingAsAddOn(
  chain: Chain,
  pending: NonNullable<Chain['pendingAddOn']>,
  leadDays: number,
): Chain {
  const term = {
    orderId: `${chain.order} (waiting add-on)`,
    count: 1,
    startsAt: pending.startsAt,
    expiresAt: addTerms(pending.startsAt, chain.duration, 1),
  };
  const addOn = { id: `${chain.id}-waiting`, licenses: pending.licenses, term };
  return { ...newAddOnRecord(chain, addOn, pending.startsAt, leadDays), version: 0 };
}

/** The name of the delayed job that buys an add-on on the date it is needed. */
export const ADD_ON_DUE = 'add-on due';
export const addOnDueData = z.object({
  chainId: z.string(),
  order: z.string(),
  customer: z.string(),
  startsAt: z.int(),
});
export type AddOnDueData = z.infer<typeof addOnDueData>;

/**
 * One per chain: a newer seat event needed from the add-on's date or sooner replaces the waiting
 * add-on; one needed later keeps it and leaves its rest to it (`pendingAddOn.restFrom`), or
 * queues after that rest (`laterSeatTotals`). The job buys each in turn, moving itself to the
 * next one's day.
 */
export function addOnJobId(chainId: string): string {
  return `addon-${chainId}`;
}

/**
 * Schedules (or moves) the chain's one waiting add-on job to the date its licenses are needed.
 * When `current` is that job itself (it bought one step of an event and the next waits), it is
 * left alone: it moves itself to the new date once the chain is saved. Called before the chain
 * is saved, so `current` may still put itself off for a moment (below).
 */
export async function scheduleAddOnJob(
  deps: WorkerDeps,
  chain: Chain,
  startsAt: number,
  current: Job,
): Promise<void> {
  if (current.id === addOnJobId(chain.id)) return;
  const existing = await waitingAddOnJob(deps, chain);
  if (existing && !(await removedUnlessRunning(existing))) {
    // A worker is running it just now (about to find the chain locked, or reporting what it
    // did): it can be neither removed nor replaced under its id. This job looks again shortly;
    // `token` is the lock the worker fetched `current` with. Reconcile's round goes on with the
    // other chains instead (put off, it could not finish): this one waits for the next round.
    if (current.queueName === deps.queues.maintenance.name) {
      throw new TransientError('add_on_job_running', `the add-on job of ${chain.order} is running`);
    }
    await waitForOtherJob(current, current.token);
  }
  await addAddOnJob(deps, chain, startsAt);
}

/** The chain's waiting add-on job, if there is one (in any state). */
function waitingAddOnJob(deps: WorkerDeps, chain: Chain): Promise<Job | undefined> {
  return deps.queues['seat-changes'].getJob(addOnJobId(chain.id));
}

/**
 * Reconcile: the chain's waiting add-on job back when it is missing (a Redis restored without
 * it), in no list at all ('unknown': Redis lost the list; it would never run) or finished with
 * the add-on still waiting. One that failed waits for a person, as a renewal's does (Bull Board
 * shows why). Answers whether it added one.
 */
export async function ensureAddOnJob(deps: WorkerDeps, chain: Chain) {
  const pending = chain.pendingAddOn;
  if (!pending || renewsNoMore(chain)) return false;
  const existing = await waitingAddOnJob(deps, chain);
  if (existing) {
    if (!neverRunsAgain(await existing.getState())) return false;
    await existing.remove();
  }
  await addAddOnJob(deps, chain, pending.startsAt);
  return true;
}

async function addAddOnJob(deps: WorkerDeps, chain: Chain, startsAt: number) {
  const data: AddOnDueData = {
    chainId: chain.id,
    order: chain.order,
    customer: chain.customer,
    startsAt,
  };
  await deps.queues['seat-changes'].add(`${ADD_ON_DUE} ${chain.order}`, data, {
    ...defaultJobOptions,
    jobId: addOnJobId(chain.id),
    delay: delayUntil(deps.clock, startsAt),
  });
}

/** Drops the chain's waiting add-on job (a newer event needs none, or buys otherwise). */
export async function removeAddOnJob(deps: WorkerDeps, chain: Chain, current: Job): Promise<void> {
  if (current.id === addOnJobId(chain.id)) return;
  const existing = await waitingAddOnJob(deps, chain);
  // One running just now finds no waiting add-on on the chain and does nothing.
  if (existing) await removedUnlessRunning(existing);
}
