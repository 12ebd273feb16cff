// The `seat-changes` queue: a new license total becomes a co-terminated partial order, an add-on
// order with its own renewals, or only the next renewal's count (DESIGN §4, seat change).

import { type Job, UnrecoverableError } from 'bullmq';
import { z } from 'zod';
import type { Chain, HistoryEntry } from '../src/chains/records.js';
import { planSeatChange } from '../src/domain/seats.js';
import { formatInstant } from '../src/format.js';
import { type EventJobData, eventJobData, eventSchemas } from '../src/intake/events.js';
import { defaultJobOptions } from '../src/queues.js';
import { chainOfEvent, delayJobUntil, waitForOtherJob, withChainLock } from './chain-lock.js';
import type { WorkerDeps } from './deps.js';
import {
  addOnIntent,
  allocation,
  applied,
  describeAllocation,
  finishPendingSeatPurchase,
  finishSeatIntent,
  paidAhead,
  paidInForce,
  partialIntent,
} from './seat-purchases.js';

export const schema = eventJobData;

/** A delayed job that buys an add-on on the date it is needed (external: no start date). */
export const ADD_ON_DUE = 'add-on due';
export const addOnDueData = z.object({
  chainId: z.string(),
  order: z.string(),
  customer: z.string(),
  startsAt: z.int(),
});

/** One per chain: a newer seat event replaces the waiting add-on. */
export function addOnJobId(chainId: string): string {
  return `addon-${chainId}`;
}

/** Schedules (or moves) the chain's one waiting add-on job to the date its licenses are needed. */
async function scheduleAddOnJob(deps: WorkerDeps, chain: Chain, startsAt: number, now: number) {
  const queue = deps.queues['seat-changes'];
  const id = addOnJobId(chain.id);
  const existing = await queue.getJob(id);
  if (existing) await existing.remove();
  const data: z.infer<typeof addOnDueData> = {
    chainId: chain.id,
    order: chain.order,
    customer: chain.customer,
    startsAt,
  };
  await queue.add(`${ADD_ON_DUE} ${chain.order}`, data, {
    ...defaultJobOptions,
    jobId: id,
    delay: Math.max(0, startsAt - now) * 1000,
  });
}

async function removeAddOnJob(deps: WorkerDeps, chain: Chain) {
  const existing = await deps.queues['seat-changes'].getJob(addOnJobId(chain.id));
  if (existing && (await existing.getState()) !== 'active') await existing.remove();
}

async function applySeatEvent(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  data: EventJobData,
) {
  const ev = eventSchemas['seats.changed'].parse(data.data);
  const chainId = await chainOfEvent(deps.chains, data.type, ev.order);
  const event = { webhookId: data.webhookId, occurredAt: data.occurredAt, total: ev.licenses };
  return withChainLock(deps.chains, job, jobToken, chainId, async (lock) => {
    if (!lock.chain)
      throw new UnrecoverableError(`seats.changed names an unknown order: ${ev.order}`);
    const { token } = lock;
    const chain = await finishPendingSeatPurchase(deps, job, { chain: lock.chain, token });
    if (chain.intent) return waitForOtherJob(job, jobToken, deps.clock.now());
    if (chain.appliedSeatEvents.includes(data.webhookId)) {
      // A retry after a crash right after the save: the waiting add-on's job may be missing.
      if (chain.pendingAddOn) {
        await scheduleAddOnJob(deps, chain, chain.pendingAddOn.startsAt, deps.clock.now());
      }
      return `already applied: ${data.webhookId}`;
    }

    const now = deps.clock.now();
    const cause = { webhookId: data.webhookId, jobId: job.id ?? '' };
    const save = (next: Chain, entry: Omit<HistoryEntry, 'cause' | 'at'>) =>
      deps.chains.save({
        chainId,
        token,
        previous: chain,
        next: { ...next, updatedAt: now },
        history: [{ at: now, ...entry, cause }],
        release: false,
      });

    if (chain.status === 'cancelled' || chain.status === 'expired') {
      await save(
        { ...chain, ...applied(chain, event) },
        {
          event: 'seats.ignored',
          detail: `${ev.licenses} licenses asked for a ${chain.status} chain: nothing to do`,
        },
      );
      return `ignored: chain ${chain.status}`;
    }
    const addOns = await deps.chains.getMany(chain.addOns);
    const decision = planSeatChange({
      ...paidAhead(chain, addOns, now),
      total: ev.licenses,
      style: deps.settings.seatIncrease,
      neededAt: ev.effectiveAt ?? now,
      occurredAt: data.occurredAt,
      lastAppliedAt: chain.lastSeatEventAt,
    });

    if (decision.kind === 'stale') {
      await save(
        { ...chain, appliedSeatEvents: applied(chain, event).appliedSeatEvents },
        {
          event: 'seats.stale',
          detail: `event of ${formatInstant(data.occurredAt)} is older than the last applied one (${formatInstant(decision.lastAppliedAt)}): ignored`,
        },
      );
      return 'stale';
    }
    if (decision.kind === 'next_renewal_only') {
      const counts = allocation(deps, chain, addOns, decision.total);
      if (chain.pendingAddOn) await removeAddOnJob(deps, chain);
      const reason = {
        decrease: 'a decrease refunds nothing',
        already_paid: 'already paid',
        after_term: 'needed from the next term',
        next_term_has_it:
          'short only until the next term, already ordered with enough, starts: an add-on would run a whole term',
      }[decision.reason];
      await save(
        { ...chain, ...applied(chain, event), ...counts, pendingAddOn: null },
        {
          event: 'seats.changed',
          detail: `${decision.total} licenses: nothing to buy now (${reason}); ${describeAllocation(counts)}`,
        },
      );
      return `next renewal: ${decision.total}`;
    }

    const jobId = job.id ?? null;
    if (deps.settings.seatIncrease === 'coterm') {
      const intent = partialIntent(
        chain,
        decision.licenses,
        decision,
        decision.rest ? { ...event, rest: true } : event,
        jobId,
      );
      const held = await save(
        { ...chain, intent, partialCount: chain.partialCount + 1, pendingAddOn: null },
        {
          event: 'seats.buying',
          detail: `buying ${decision.licenses} licenses from ${formatInstant(decision.startsAt)} as ${intent.orderId}`,
        },
      );
      if (chain.pendingAddOn) await removeAddOnJob(deps, chain);
      // With `rest`, the term in force lacks more than this partial buys: finishing it buys the
      // rest too, and the chain keeps the event until then, so a crash in between loses nothing.
      const done = await finishSeatIntent(deps, job, { chain: held, token });
      const before = new Set(chain.partials.map((p) => p.orderId));
      const bought = done.partials.filter((p) => !before.has(p.orderId)).map((p) => p.orderId);
      return `partial: ${bought.join(', ') || intent.orderId}`;
    }
    if (deps.provisioning.variant === 'external' && decision.startsAt > now) {
      // createFirstOrder starts at once: the add-on is bought on the date it is needed. The job
      // comes first: one that fires without a waiting add-on on the chain does nothing.
      await scheduleAddOnJob(deps, chain, decision.startsAt, now);
      const counts = allocation(deps, chain, addOns, decision.total, decision.licenses);
      await save(
        {
          ...chain,
          ...applied(chain, event),
          ...counts,
          pendingAddOn: {
            licenses: decision.licenses,
            startsAt: decision.startsAt,
            occurredAt: data.occurredAt,
            total: decision.total,
          },
        },
        {
          event: 'seats.addon_scheduled',
          detail: `${decision.licenses} more licenses needed from ${formatInstant(decision.startsAt)}: an add-on will be ordered then; until it is, ${describeAllocation(counts)}`,
        },
      );
      return `add-on scheduled: ${formatInstant(decision.startsAt)}`;
    }
    const intent = addOnIntent(deps, chain, decision.licenses, decision.startsAt, event, jobId);
    const held = await save(
      { ...chain, intent, addOnCount: chain.addOnCount + 1, pendingAddOn: null },
      {
        event: 'seats.buying',
        detail: `buying ${decision.licenses} licenses from ${formatInstant(decision.startsAt)} as add-on ${intent.orderId}`,
      },
    );
    if (chain.pendingAddOn) await removeAddOnJob(deps, chain);
    await finishSeatIntent(deps, job, { chain: held, token });
    return `add-on: ${intent.orderId}`;
  });
}

/** The waiting add-on's date came: buy it (unless a newer event withdrew it). */
async function buyDueAddOn(deps: WorkerDeps, job: Job, jobToken: string | undefined) {
  const data = addOnDueData.parse(job.data);
  return withChainLock(deps.chains, job, jobToken, data.chainId, async (lock) => {
    if (!lock.chain) return 'skipped: unknown chain';
    const { token } = lock;
    const chain = await finishPendingSeatPurchase(deps, job, { chain: lock.chain, token });
    if (chain.intent) return waitForOtherJob(job, jobToken, deps.clock.now());
    const pending = chain.pendingAddOn;
    if (!pending) return 'skipped: no add-on waiting';
    const now = deps.clock.now();
    if (now < pending.startsAt) return delayJobUntil(job, jobToken, pending.startsAt, now);
    if (chain.status === 'cancelled') return 'skipped: chain cancelled';
    const addOns = await deps.chains.getMany(chain.addOns);
    const total = pending.total ?? paidInForce(chain, addOns, now) + pending.licenses;
    const event = {
      webhookId: chain.appliedSeatEvents.at(-1) ?? '',
      occurredAt: pending.occurredAt,
      total,
    };
    const intent = addOnIntent(deps, chain, pending.licenses, now, event, job.id ?? null);
    const held = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: {
        ...chain,
        intent,
        addOnCount: chain.addOnCount + 1,
        pendingAddOn: null,
        updatedAt: now,
      },
      history: [
        {
          at: now,
          event: 'seats.buying',
          detail: `buying the waiting ${pending.licenses} licenses as add-on ${intent.orderId}`,
          cause: { jobId: job.id ?? '' },
        },
      ],
      release: false,
    });
    await finishSeatIntent(deps, job, { chain: held, token });
    return `add-on: ${intent.orderId}`;
  });
}

export function makeProcessor(deps: WorkerDeps) {
  return async function processSeatChange(job: Job, jobToken?: string): Promise<string> {
    if (job.name.startsWith(ADD_ON_DUE)) return buyDueAddOn(deps, job, jobToken);
    const data = eventJobData.parse(job.data);
    if (data.type !== 'seats.changed') {
      throw new UnrecoverableError(`the seat-changes queue does not handle ${data.type} events`);
    }
    return applySeatEvent(deps, job, jobToken, data);
  };
}
