// An order a provider may still make after its chain was cancelled. A request that timed out on
// the workers' side can be committed by a remote service moments later, after the cancel asked
// for that order and heard "not found". A cancelled family never gets a new order (DESIGN §4),
// so the cancel leaves a check behind that looks again a few times and cancels what appeared.
import type { Job, Queue } from 'bullmq';
import { z } from 'zod';
import { cancelIfMade } from '../src/chains/cancel.js';
import { digest } from '../src/chains/keys.js';
import { type Clock, delayUntil } from '../src/clock.js';
import { defaultJobOptions, removedUnlessRunning } from '../src/queues.js';
import { delayJobUntil, withChainLock } from './chain-lock.js';
import type { WorkerDeps } from './deps.js';

/** The name of the check's job in the `orders` queue, followed by the order it looks for. */
export const LATE_ORDER_CHECK = 'late order check';

/**
 * When the checks run, in seconds after the cancel: past a request's timeout (10 s by default)
 * many times over, and past what a remote holds a request it has accepted.
 */
export const LATE_ORDER_CHECK_AFTER = [60, 600, 3_600] as const;

export const lateOrderCheckData = z.object({
  chainId: z.string().min(1),
  /** The order that was not found at the cancel, and may yet be made. */
  orderId: z.string().min(1),
  /** When the cancel found it missing (epoch seconds): the checks are timed from it. */
  since: z.int().min(0),
  /** Which check of LATE_ORDER_CHECK_AFTER runs next. */
  check: z
    .int()
    .min(0)
    .max(LATE_ORDER_CHECK_AFTER.length - 1),
});
export type LateOrderCheckData = z.infer<typeof lateOrderCheckData>;

/** One check per order id (ids are never reused): a cancel run again adds none twice. */
export function lateOrderCheckJobId(orderId: string): string {
  return `late-${digest(orderId)}`;
}

/**
 * What a cancel that asked the provider for an intent's order leaves behind. Not `made` (the
 * provider did not know it): the checks for it, from now. Made (cancelled by the cancel itself):
 * no check, and one left by an earlier attempt goes, so it never reports as late an order the
 * cancel dealt with. Called before the cancel is saved: a cancel that dies in between leaves a
 * check that finds the chain not cancelled and does nothing, and its retry (however much later)
 * schedules the checks again, so a recorded cancel never stands without them.
 */
export async function settleLateOrderCheck(
  queue: Queue,
  clock: Clock,
  target: { chainId: string; orderId: string; made: boolean },
): Promise<void> {
  const { chainId, orderId, made } = target;
  const jobId = lateOrderCheckJobId(orderId);
  const existing = await queue.getJob(jobId);
  if (existing && !(await removedUnlessRunning(existing))) {
    // Running: it waits for the chain's lock, which this cancel holds, and then finds the chain
    // cancelled and looks for the order itself.
    return;
  }
  if (made) return;
  const since = clock.now();
  const data: LateOrderCheckData = { chainId, orderId, since, check: 0 };
  await queue.add(`${LATE_ORDER_CHECK} ${orderId}`, data, {
    ...defaultJobOptions,
    jobId,
    delay: delayUntil(clock, since + LATE_ORDER_CHECK_AFTER[0]),
  });
}

/** One check: the order cancelled if it was made meanwhile, else the next check, if any. */
export async function checkLateOrder(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
): Promise<string> {
  const data = lateOrderCheckData.parse(job.data);
  return withChainLock(deps.chains, job, jobToken, data.chainId, async ({ chain, token }) => {
    // Not cancelled: the cancel that asked for this died before its save, and an order made
    // for the chain is its own job's to record.
    if (chain?.status !== 'cancelled') return 'skipped: chain not cancelled';
    const cancelled = await cancelIfMade(deps.provisioning, data.orderId);
    if (cancelled !== null) {
      // A check run again after its entry was saved (its worker died before BullMQ heard it was
      // done) finds the order cancelled again, which the provider answers alike: one entry.
      if (await recordedLate(deps, chain.id, data.orderId)) {
        return `cancelled late order: ${data.orderId} (recorded before)`;
      }
      await deps.chains.recordEntry(
        { chain, token },
        {
          at: deps.clock.now(),
          event: 'order.late',
          detail: `${data.orderId} was made after its chain was cancelled (a request that had timed out): cancelled at the provider`,
          cause: { jobId: job.id ?? '', orderId: data.orderId },
        },
      );
      deps.log.warn(
        { chainId: chain.id, order: data.orderId },
        'an order made after its chain was cancelled was cancelled',
      );
      return `cancelled late order: ${data.orderId}`;
    }
    const next = data.check + 1;
    const after = LATE_ORDER_CHECK_AFTER[next];
    if (after === undefined) return `no late order: ${data.orderId}`;
    await job.updateData({ ...data, check: next });
    return delayJobUntil(job, jobToken, data.since + after, deps.clock);
  });
}

/** Whether the chain's history already says that `orderId` was made late and cancelled. */
async function recordedLate(deps: WorkerDeps, chainId: string, orderId: string): Promise<boolean> {
  const [read] = await deps.chains.getManyWithHistory([chainId]);
  return (read?.history ?? []).some(
    (entry) => entry.event === 'order.late' && entry.cause.orderId === orderId,
  );
}
