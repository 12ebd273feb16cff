// A randomized, model-based storm of seat changes against the whole system (real server,
// workers, embedded provider, Redis), with a manual clock and the real delayed jobs fired when
// they come due. After each random sequence the provider's orders of the chain family are checked
// against the product's promises (README "Seat changes", DESIGN §4):
//   (1) coverage: licenses in force >= the total the latest applied event asks for, every instant
//       a main term is in force, from the event's date needed;
//   (2) never paid twice: no seat purchase buys licenses already in force when it starts;
//   (3) the next renewal counts (main + add-ons + what they leave a waiting add-on) equal the
//       latest total, which a waiting add-on carries for when it is bought;
//   (4) no duplicate orders.
// STORM_RUNS, STORM_SEED, STORM_VARIANT (coterm|addon|external), STORM_MAXLEN, STORM_AHEAD,
// STORM_AUTORENEW=0, STORM_STRICT=1, STORM_DEBUG=1 and STORM_SCENARIO (a counterexample's JSON
// object, replayed once) steer it.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { addOnJobId } from '../../../jobs/waiting-add-ons.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import type { ChainView } from '../../../src/chains/view.js';
import { type ManualClock, manualClock, systemClock } from '../../../src/clock.js';
import { addTerms } from '../../../src/domain/periods.js';
import { formatInstant } from '../../../src/format.js';
import { webhookJobId } from '../../../src/intake/webhooks.js';
import type { OrderRecord } from '../../../src/provisioning/records.js';
import { delayedFireTime, type QueueName } from '../../../src/queues.js';
import {
  DAY,
  familyOrdersAtProvider,
  jobState,
  orderPlaced,
  type System,
  useSystem,
} from '../../helpers/system.js';

const RUNS = Number(process.env.STORM_RUNS ?? 10);
/**
 * A fixed seed by default, so the suite runs the same scenarios every time (a failure is a
 * change, not bad luck); set STORM_SEED (any integer) and STORM_RUNS to explore others.
 */
const SEED = Number(process.env.STORM_SEED ?? 20_261_123);
const ONLY = process.env.STORM_VARIANT;
const LEAD = 7 * DAY;

/** What a renewal starting at `startsAt` carries, as the chain view names it. */
function renewalCountAt(
  chain: Pick<ChainView, 'nextLicenses' | 'laterLicenses'>,
  startsAt: number,
): number {
  return (
    chain.laterLicenses.filter((l) => l.from <= startsAt).at(-1)?.licenses ?? chain.nextLicenses
  );
}

// --- scenario ------------------------------------------------------------------------------------

type When =
  | { kind: 'now' }
  | { kind: 'past'; days: number }
  | { kind: 'ahead'; days: number }
  | { kind: 'termEnd'; days: number };
type Action =
  | { kind: 'seats'; total: number; when: When; occurred: 'none' | { aheadSeconds: number } }
  | { kind: 'advance'; days: number }
  | { kind: 'autoRenew'; enabled: boolean };
interface Scenario {
  licenses: number;
  /** Marketplace: the first term started this many days ago. External: days advanced after placing. */
  daysIn: number;
  actions: Action[];
}

const whenArb: fc.Arbitrary<When> = fc.oneof(
  fc.constant<When>({ kind: 'now' }),
  fc.integer({ min: 1, max: 10 }).map<When>((days) => ({ kind: 'past', days })),
  fc
    .integer({ min: 1, max: Number(process.env.STORM_AHEAD ?? 10) })
    .map<When>((days) => ({ kind: 'ahead', days })),
  fc.integer({ min: 0, max: 5 }).map<When>((days) => ({ kind: 'termEnd', days })),
);
const seatsArb: fc.Arbitrary<Action> = fc.record({
  kind: fc.constant('seats' as const),
  total: fc.integer({ min: 1, max: 40 }),
  when: whenArb,
  occurred: fc.oneof(
    fc.constant('none' as const),
    fc.integer({ min: -7200, max: 43_200 }).map((aheadSeconds) => ({ aheadSeconds })),
  ),
});
const actionArb = (withAutoRenew: boolean): fc.Arbitrary<Action> =>
  fc.oneof(
    { arbitrary: seatsArb, weight: 5 },
    {
      arbitrary: fc.integer({ min: 1, max: 20 }).map<Action>((days) => ({ kind: 'advance', days })),
      weight: 3,
    },
    {
      arbitrary: fc.boolean().map<Action>((enabled) => ({ kind: 'autoRenew', enabled })),
      weight: withAutoRenew ? 1 : 0,
    },
  );
const scenarioArb = (withAutoRenew: boolean): fc.Arbitrary<Scenario> =>
  fc.record({
    licenses: fc.integer({ min: 1, max: 40 }),
    daysIn: fc.integer({ min: 0, max: 27 }),
    actions: fc.array(actionArb(withAutoRenew), {
      minLength: 2,
      maxLength: Number(process.env.STORM_MAXLEN ?? 8),
    }),
  });

// --- the model -----------------------------------------------------------------------------------

/** A seat event as the model knows it once processed. */
interface ModelEvent {
  id: string;
  total: number;
  /** From when it applies: the date needed, now if past, the term's end if at/after it. */
  eff: number;
  /** Index of the action that sent it (its orders are created during that action). */
  action: number;
  processedAt: number;
  /** The date needed was at or after the end of the latest ordered term. */
  afterTerm: boolean;
  /** The date needed as sent (now if past), before the term-end rule. */
  needed: number;
  outcome: 'applied' | 'stale' | 'ignored' | 'refused' | 'unknown';
  /** The chain had a renewal ordered ahead (a term in force and a next one) when it ran. */
  aheadTermStart: number | null;
  describe: string;
}

interface Role {
  kind: 'main' | 'partial' | 'addon' | 'addon-renewal';
}
function roleOf(parent: string, id: string): Role['kind'] {
  if (id === parent || /^\.r\d+$/.test(id.slice(parent.length))) return 'main';
  const rest = id.slice(parent.length);
  if (/^\.p\d+$/.test(rest)) return 'partial';
  if (/^\.a\d+$/.test(rest)) return 'addon';
  return 'addon-renewal';
}
const seqOf = (o: OrderRecord) => Number(o.id.replace('ord-', ''));

async function familyOrders(system: System, parent: string): Promise<OrderRecord[]> {
  return (await familyOrdersAtProvider(system, parent)).sort((a, b) => seqOf(a) - seqOf(b));
}

// --- driving the system --------------------------------------------------------------------------

const QUEUES: QueueName[] = ['orders', 'renewals', 'seat-changes'];

/** Waits until no job runs or is about to, and nothing is in flight on the chain. */
async function quiesce(system: System, order: string | null) {
  const deadline = Date.now() + 30_000;
  let quiet = 0;
  let why = '';
  for (;;) {
    why = '';
    for (const name of QUEUES) {
      const q = system.queue(name);
      const counts = await q.getJobCounts('active', 'waiting', 'prioritized', 'waiting-children');
      const busy = Object.values(counts).reduce((a, b) => a + b, 0);
      if (busy > 0) why = `${name}: ${JSON.stringify(counts)}`;
      if (!why) {
        for (const job of await q.getJobs(['delayed'])) {
          const at = await delayedFireTime(q, job.id as string);
          if (at !== null && at <= Date.now() + 4000) why = `${name}: ${job.id} fires soon`;
        }
      }
      if (why) break;
    }
    if (!why && order !== null) {
      const c = await system.chain(order);
      if (c.inFlight || c.addOns.some((a) => a.inFlight))
        why = `in flight ${JSON.stringify(c.inFlight)}`;
    }
    if (!why) {
      quiet += 1;
      if (quiet >= 2) return;
    } else quiet = 0;
    if (Date.now() > deadline) throw new Error(`system not quiet: ${why}`);
    await sleep(40);
  }
}

interface Due {
  at: number;
  queue: QueueName;
  jobId: string;
}
async function delayedState(system: System, queue: QueueName, jobId: string) {
  const job = await system.queue(queue).getJob(jobId);
  return job ? await job.getState() : null;
}

/** The jobs of the family due by the manual clock (earliest first) that still wait in delayed. */
async function dueJobs(system: System, order: string): Promise<Due[]> {
  const c = await system.chain(order);
  const out: Due[] = [];
  const chains: { order: string; nextRenewalAt: number | null; count: number }[] = [
    { order: c.order, nextRenewalAt: c.nextRenewalAt, count: c.term.count },
    ...c.addOns.map((a) => ({
      order: a.order,
      nextRenewalAt: a.nextRenewalAt,
      count: a.term.count,
    })),
  ];
  for (const ch of chains) {
    const jobId = renewalJobId(chainIdOf(ch.order), ch.count + 1);
    if ((await delayedState(system, 'renewals', jobId)) !== 'delayed') continue;
    const job = await system.queue('renewals').getJob(jobId);
    const at = ch.nextRenewalAt ?? (job?.data?.dueAt as number | undefined) ?? null;
    if (at !== null) out.push({ at, queue: 'renewals', jobId });
  }
  const addOnJob = await system.queue('seat-changes').getJob(addOnJobId(chainIdOf(order)));
  if (addOnJob && (await addOnJob.getState()) === 'delayed') {
    out.push({
      at: addOnJob.data.startsAt as number,
      queue: 'seat-changes',
      jobId: addOnJob.id as string,
    });
  }
  return out.sort((a, b) => a.at - b.at);
}

/** Moves the clock to `target`, firing each job of the family at its own time on the way. */
async function advanceTo(
  system: System,
  clock: ManualClock,
  order: string,
  target: number,
  log: string[],
) {
  const fired = new Set<string>();
  for (let i = 0; i < 60; i += 1) {
    const due = (await dueJobs(system, order)).filter(
      (d) => d.at <= target && !fired.has(`${d.jobId}@${Math.max(d.at, clock.now())}`),
    );
    const next = due[0];
    if (!next) break;
    if (next.at > clock.now()) clock.set(next.at);
    fired.add(`${next.jobId}@${clock.now()}`);
    log.push(`  clock ${formatInstant(clock.now())}: fire ${next.jobId}`);
    await system.promote(next.queue, next.jobId);
    await quiesce(system, order);
  }
  if (target > clock.now()) clock.set(target);
  await quiesce(system, order);
}

/**
 * What a waiting add-on's rest or the totals queued after it (external) buy, each from its own
 * day once what precedes it is bought, is known for sure only when bought: the checks below do not
 * model it. So a run that ends with such purchases to come advances to each day until none is
 * left (a step of a stepped event shows its day only once the step before it is bought).
 */
async function settlePurchasesToCome(
  system: System,
  clock: ManualClock,
  order: string,
  log: string[],
  rel: (t: number) => string,
) {
  const store = new ChainStore(system.started.runtime.redis);
  for (let i = 0; i < 10; i += 1) {
    const chain = await store.get(chainIdOf(order));
    const pending = chain?.pendingAddOn ?? null;
    if (!chain || pending === null || (!pending.rest && chain.laterSeatTotals.length === 0)) return;
    const days = [
      pending.startsAt,
      pending.restFrom ?? 0,
      ...chain.laterSeatTotals.map((l) => l.from),
    ];
    const target = Math.max(clock.now(), ...days) + 1;
    log.push(
      `settle at ${rel(clock.now())}: advance to ${rel(target)}, what is to be bought after the waiting add-on`,
    );
    await advanceTo(system, clock, order, target, log);
  }
  // Still to come after ten days passed by: what follows the add-on is never bought.
  throw new Error(`purchases after the waiting add-on never made\n${log.join('\n')}`);
}

// --- checks --------------------------------------------------------------------------------------

interface Ctx {
  parent: string;
  duration: 'monthly' | 'yearly';
  style: 'coterm' | 'addon';
  external: boolean;
  initial: { licenses: number; eff: number };
  events: ModelEvent[];
  /** Auto-renew before each action. */
  autoRenewBefore: boolean[];
  /** The first action that switched auto-renew off (null: never). */
  autoRenewOffAction: number | null;
  /** Highest provider order sequence before each action (index = action; last = after all). */
  seqBefore: number[];
  log: string[];
}

/** The total required at `t`, from the events applied up to action `upTo` (inclusive). */
function required(
  ctx: Ctx,
  t: number,
  upTo = Number.POSITIVE_INFINITY,
): { total: number; by: ModelEvent | null } {
  let best: { total: number; by: ModelEvent | null } = { total: ctx.initial.licenses, by: null };
  for (const e of ctx.events) {
    if (e.outcome !== 'applied' || e.action > upTo) continue;
    if (e.eff <= t) best = { total: e.total, by: e };
  }
  return best;
}

function inForce(
  orders: readonly { startsAt: number; expiresAt: number; licenses: number }[],
  t: number,
) {
  return orders.reduce((n, o) => (o.startsAt <= t && t < o.expiresAt ? n + o.licenses : n), 0);
}

function actionOf(ctx: Ctx, o: OrderRecord): number {
  const s = seqOf(o);
  for (let k = 0; k < ctx.seqBefore.length - 1; k += 1) {
    if (s > (ctx.seqBefore[k] as number) && s <= (ctx.seqBefore[k + 1] as number)) return k;
  }
  return -1; // placement
}

/**
 * Documented (README Decisions, "Two terms ahead, two counts"): an add-on that renewed early
 * counts the lower of its two counts while both run, so a purchase made then may add up to the
 * difference on top of the higher one.
 */
function earlyAddOnAllowance(
  parent: string,
  prior: readonly OrderRecord[],
  o: OrderRecord,
  t: number,
) {
  let allowance = 0;
  const byAddOn = new Map<string, OrderRecord[]>();
  for (const p of prior) {
    const m = p.remoteId.slice(parent.length).match(/^(\.a\d+)(\.r\d+)?$/);
    if (!m) continue;
    byAddOn.set(m[1] as string, [...(byAddOn.get(m[1] as string) ?? []), p]);
  }
  for (const terms of byAddOn.values()) {
    for (const q of terms) {
      const r = terms.find((x) => x.startsAt === q.expiresAt);
      if (!r || q.expiresAt <= o.createdAt) continue;
      allowance +=
        t < r.startsAt
          ? Math.max(0, q.licenses - r.licenses)
          : Math.max(0, r.licenses - q.licenses);
    }
  }
  return allowance;
}

function checkAll(
  ctx: Ctx,
  orders: OrderRecord[],
  view: ChainView,
  pending: { licenses: number; startsAt: number; total?: number | undefined } | null,
  now: number,
): string[] {
  const problems: string[] = [];
  const live = orders.filter((o) => o.status !== 'cancelled');
  const main = live.filter((o) => roleOf(ctx.parent, o.remoteId) === 'main');
  const mainAt = (t: number) => main.find((o) => o.startsAt <= t && t < o.expiresAt);
  // A waiting add-on (external) is bought on its day, then renews with its share.
  const virtual: { remoteId: string; startsAt: number; expiresAt: number; licenses: number }[] = [];
  if (pending) {
    let start = pending.startsAt;
    for (let i = 0; i < (view.autoRenew ? 3 : 1); i += 1) {
      const end = addTerms(start, ctx.duration, 1);
      virtual.push({
        remoteId: '(waiting add-on)',
        startsAt: start,
        expiresAt: end,
        licenses: pending.licenses,
      });
      start = end;
    }
  }
  // Add-ons renew on their own cycle: a renewal not yet ordered is promised by the count the
  // view names for its start (the next one's, or a later one's from its date).
  for (const a of view.addOns) {
    if (a.nextRenewalAt === null) continue;
    let start = a.term.expiresAt;
    for (let i = 0; i < 3; i += 1) {
      const licenses = renewalCountAt(a, start);
      if (licenses <= 0) break;
      const end = addTerms(start, ctx.duration, 1);
      virtual.push({
        remoteId: `(renewal of ${a.order})`,
        startsAt: start,
        expiresAt: end,
        licenses,
      });
      start = end;
    }
  }
  const counted = [...live, ...virtual];
  const points = new Set<number>();
  for (const o of counted) {
    points.add(o.startsAt);
    points.add(o.expiresAt);
  }
  for (const e of ctx.events) points.add(e.eff);
  const from = Math.min(
    ...ctx.events.filter((e) => e.outcome === 'applied').map((e) => e.eff),
    Number.POSITIVE_INFINITY,
  );
  const sorted = [...points].filter((t) => t >= from).sort((a, b) => a - b);

  // (1) coverage
  for (const t of sorted) {
    if (!mainAt(t)) continue;
    const need = required(ctx, t);
    if (need.by === null) continue;
    const e = need.by;
    // With add-ons, a date needed at or after the term's end only sets the next counts, split
    // so that the last renewal by that date carries the excess (Decisions, "The main chain
    // holds its add-ons' next counts"), and a decrease shortens an add-on renewing before the
    // date (Known limitations); send it once the next renewal is the one it concerns. Checked
    // by (3), not here.
    if (ctx.style === 'addon' && e.afterTerm) continue;
    // Documented: an add-on is not bought for the last days of a term in force alone.
    if (ctx.style === 'addon' && e.aheadTermStart !== null && t < e.aheadTermStart) continue;
    // Documented ("no gap orders"): licenses ordered before the event count from their ordering.
    const before = ctx.seqBefore[e.action] ?? 0;
    const lenient = live.filter(
      (o) =>
        (roleOf(ctx.parent, o.remoteId) === 'partial' ||
          roleOf(ctx.parent, o.remoteId) === 'addon') &&
        seqOf(o) <= before &&
        o.startsAt > t &&
        o.createdAt <= t,
    );
    // Auto-renew off stops the add-ons too (README "A chain": autoRenew "renew the chain and its
    // add-ons"): an add-on that ends inside an ordered main term then leaves its days short. And
    // documented (Decisions, "Bought in steps"): with auto-renew off after an early renewal, an
    // add-on bought in the term in force leaves the next term's last days (the lead, a few days
    // more when the add-on's month is shorter) short.
    if (ctx.autoRenewOffAction !== null) {
      const offSeq = ctx.seqBefore[ctx.autoRenewOffAction] ?? 0;
      const mainEnd = mainAt(t)?.expiresAt ?? 0;
      const stopped = live.filter((o) => {
        const r = roleOf(ctx.parent, o.remoteId);
        if ((r !== 'addon' && r !== 'addon-renewal') || o.expiresAt > t) return false;
        if (
          live.some(
            (x) =>
              x !== o &&
              x.remoteId.startsWith(`${o.remoteId.replace(/\.r\d+$/, '')}.`) &&
              x.startsAt === o.expiresAt,
          )
        )
          return false;
        // (The lead, plus the days a month of the add-on's is shorter than the main term.)
        const mainTerm = mainAt(t);
        const shorter = mainTerm
          ? Math.max(0, mainTerm.expiresAt - mainTerm.startsAt - (o.expiresAt - o.startsAt))
          : 0;
        return seqOf(o) <= offSeq || mainEnd - o.expiresAt <= LEAD + shorter;
      });
      // The same for an add-on still waiting for its day (external): it will not renew either.
      const waitingStopped = virtual.filter(
        (v) => v.remoteId === '(waiting add-on)' && v.expiresAt <= t && mainEnd - t <= LEAD,
      );
      const left = [...stopped, ...waitingStopped].reduce((n, o) => n + o.licenses, 0);
      if (inForce(counted, t) + left >= need.total) continue;
    }
    // Documented (Known limitations: "A total needed from a date after the end of the latest
    // ordered term sets the next renewals' counts at once"): a newer total needed after the term
    // leaves an add-on that renews before its date short until then. Tolerated unless
    // STORM_STRICT=1.
    if (
      process.env.STORM_STRICT !== '1' &&
      ctx.style === 'addon' &&
      ctx.events.some(
        (l) =>
          l.outcome === 'applied' &&
          l.afterTerm &&
          l.action > e.action &&
          l.processedAt <= t &&
          l.needed > t,
      )
    )
      continue;
    const have = inForce(counted, t) + lenient.reduce((n, o) => n + o.licenses, 0);
    if (have < need.total) {
      problems.push(
        `(1) coverage at ${formatInstant(t)}: ${have} in force < ${need.total} asked by ${e.describe} [in force: ${counted
          .filter((o) => o.startsAt <= t && t < o.expiresAt)
          .map((o) => `${o.remoteId}=${o.licenses}`)
          .join(', ')}]`,
      );
      break;
    }
  }

  // (2) never paid twice: each seat purchase buys only what is missing when it runs.
  for (const o of live) {
    const role = roleOf(ctx.parent, o.remoteId);
    if (role !== 'partial' && role !== 'addon') continue;
    const k = actionOf(ctx, o);
    const prior = live.filter((p) => p !== o && seqOf(p) < seqOf(o));
    // Documented (Decisions, "Seat changes and payment delays"): an external add-on bought on
    // its day (by its job, in an action that sent no event) was kept for an older event's date
    // and is bought for a whole term, as a marketplace add-on bought at once would be: a newer
    // event needing fewer from a later date refunds nothing.
    const boughtOnItsDay =
      ctx.external && role === 'addon' && !ctx.events.some((e) => e.action === k);
    const neededAtStart = boughtOnItsDay ? required(ctx, o.startsAt, k).total : 0;
    const pts = [...points].filter((t) => t >= o.startsAt && t < o.expiresAt).sort((a, b) => a - b);
    for (const t of pts) {
      if (!mainAt(t)) continue;
      // Documented: a purchase over two terms gives the term in force the difference on top for
      // its last days (at most the renewal lead).
      const boundary = main.find(
        (m) => m.expiresAt > t && m.expiresAt < o.expiresAt && m.startsAt <= t,
      );
      if (boundary && boundary.expiresAt - t <= LEAD) continue;
      const need = Math.max(required(ctx, t, k).total, neededAtStart);
      const p = inForce(prior, t);
      const over = p + o.licenses - Math.max(need, p);
      // Documented (Decisions, "Bought in steps"): after an early renewal with auto-renew off, an
      // event is bought in one add-on from the first day short, which "may overlap the last days
      // of one that stopped" (add-ons that will not renew).
      const stoppedOverlap =
        ctx.autoRenewBefore[k] === false
          ? prior
              .filter(
                (q) =>
                  roleOf(ctx.parent, q.remoteId).startsWith('addon') &&
                  q.startsAt <= t &&
                  t < q.expiresAt,
              )
              .filter(
                (q) =>
                  !prior.some(
                    (x) =>
                      x.startsAt === q.expiresAt &&
                      x.remoteId.startsWith(`${q.remoteId.replace(/\.r\d+$/, '')}.`),
                  ),
              )
              .reduce((n, q) => n + q.licenses, 0)
          : 0;
      if (over > 0 && over <= earlyAddOnAllowance(ctx.parent, prior, o, t) + stoppedOverlap)
        continue;
      if (over > 0) {
        problems.push(
          `(2) ${o.remoteId} (${o.licenses}, ${formatInstant(o.startsAt)} – ${formatInstant(o.expiresAt)}) pays ${over} twice at ${formatInstant(t)}: ${p} already in force [${prior
            .filter((q) => q.startsAt <= t && t < q.expiresAt)
            .map((q) => `${q.remoteId}=${q.licenses}`)
            .join(', ')}], ${need} needed`,
        );
        break;
      }
    }
  }

  // (3) next renewal counts
  if (view.status !== 'cancelled' && view.status !== 'expired') {
    const lastApplied = [...ctx.events].reverse().find((e) => e.outcome === 'applied');
    const total = lastApplied?.total ?? ctx.initial.licenses;
    // The shares of the latest total: what renewals carry once every earlier need has passed.
    const share = (c: Pick<ChainView, 'nextLicenses' | 'laterLicenses'>) =>
      renewalCountAt(c, Number.POSITIVE_INFINITY);
    const held = share(view) + view.addOns.reduce((n, a) => n + share(a), 0);
    // A waiting add-on takes what the counts leave for it (0 up to its licenses), and carries the
    // total the counts are worked out from once it is bought.
    const next = pending ? held + Math.min(pending.licenses, Math.max(0, total - held)) : held;
    if (next !== total || (pending && pending.total !== undefined && pending.total !== total)) {
      problems.push(
        `(3) next renewals carry ${next} (main ${view.nextLicenses}, add-ons ${view.addOns
          .map((a) => `${a.order}=${a.nextLicenses}`)
          .join(
            ', ',
          )}${pending ? `, waiting ${pending.licenses}` : ''}), the latest total is ${total}`,
      );
    }
  }

  // (4) duplicates: two purchases with the same start and end made by one action, or two main
  // orders for one term.
  const seen = new Map<string, string>();
  for (const o of live) {
    const role = roleOf(ctx.parent, o.remoteId);
    const key =
      role === 'main'
        ? `main ${o.startsAt}`
        : role === 'addon-renewal'
          ? `ar ${o.remoteId}`
          : `${role} ${o.startsAt} ${o.expiresAt} ${actionOf(ctx, o)}`;
    const other = seen.get(key);
    if (other) problems.push(`(4) ${o.remoteId} duplicates ${other}`);
    seen.set(key, o.remoteId);
  }
  void now;
  return problems;
}

// --- one run -------------------------------------------------------------------------------------

let runNo = 0;

async function runScenario(
  system: System,
  clock: ManualClock,
  variant: { name: string; external: boolean; style: 'coterm' | 'addon' },
  sc: Scenario,
): Promise<void> {
  runNo += 1;
  const parent = `ST-${randomUUID().slice(0, 8)}-${runNo}`;
  const log: string[] = [];
  const t0 = clock.now();
  const rel = (t: number) => `${((t - t0) / DAY).toFixed(2)}d`;
  const startsAt = variant.external ? undefined : t0 - sc.daysIn * DAY;
  log.push(
    `place ${parent}: ${sc.licenses} licenses, ${variant.external ? 'now' : `startsAt now-${sc.daysIn}d`} (t0 = ${formatInstant(t0)})`,
  );
  const placed = await system.send(
    'order.placed',
    orderPlaced({
      order: parent,
      licenses: sc.licenses,
      ...(startsAt !== undefined ? { startsAt } : {}),
    }),
  );
  expect(placed.status).toBe(202);
  await system.waitForChain(parent, () => true);
  await quiesce(system, parent);
  const first = await system.chain(parent);
  const ctx: Ctx = {
    parent,
    duration: first.duration,
    style: variant.style,
    external: variant.external,
    initial: { licenses: sc.licenses, eff: first.term.startsAt },
    events: [],
    seqBefore: [],
    autoRenewOffAction: null,
    autoRenewBefore: [],
    log,
  };
  if (variant.external && sc.daysIn > 0) {
    log.push(`advance ${sc.daysIn}d (setup)`);
    await advanceTo(system, clock, parent, clock.now() + sc.daysIn * DAY, log);
  }
  const seqNow = async () => Math.max(0, ...(await familyOrders(system, parent)).map(seqOf));
  let lastExplicit = 0;
  let lastAppliedO: number | null = null;
  for (const [k, action] of sc.actions.entries()) {
    ctx.seqBefore[k] = await seqNow();
    ctx.autoRenewBefore[k] = (await system.chain(parent)).autoRenew;
    const now = clock.now();
    if (action.kind === 'advance') {
      log.push(`#${k} at ${rel(now)}: advance ${action.days}d`);
      await advanceTo(system, clock, parent, now + action.days * DAY, log);
    } else if (action.kind === 'autoRenew') {
      log.push(`#${k} at ${rel(now)}: auto-renew ${action.enabled ? 'on' : 'off'}`);
      if (!action.enabled && ctx.autoRenewOffAction === null) ctx.autoRenewOffAction = k;
      const res = await system.ops('PUT', `/ops/chains/${encodeURIComponent(parent)}/auto-renew`, {
        enabled: action.enabled,
      });
      expect(res.status).toBe(200);
      await quiesce(system, parent);
    } else {
      const before = await system.chain(parent);
      const termEnd = before.term.expiresAt;
      const w = action.when;
      const effectiveAt =
        w.kind === 'now'
          ? undefined
          : w.kind === 'past'
            ? now - w.days * DAY
            : w.kind === 'ahead'
              ? now + w.days * DAY
              : termEnd + w.days * DAY;
      let occurredAt: number | undefined;
      if (action.occurred !== 'none') {
        const o = Math.max(now + action.occurred.aheadSeconds, lastExplicit + 1);
        if (o <= now + 86_000) {
          occurredAt = o;
          lastExplicit = o;
        }
      }
      const id = `seat-${parent}-${k}`;
      const data: Record<string, unknown> = { order: parent, licenses: action.total };
      if (effectiveAt !== undefined) data.effectiveAt = effectiveAt;
      if (occurredAt !== undefined) data.occurredAt = occurredAt;
      const needed = effectiveAt ?? now;
      const eff = needed >= termEnd ? termEnd : Math.max(needed, now);
      const describe = `#${k} seats ${action.total}${effectiveAt !== undefined ? ` effectiveAt ${rel(effectiveAt)}` : ''}${
        occurredAt !== undefined ? ` occurredAt ${rel(occurredAt)}` : ''
      } (sent ${rel(now)}, term end ${rel(termEnd)})`;
      log.push(`#${k} at ${rel(now)}: ${describe}`);
      const res = await system.send('seats.changed', data, { id });
      expect(res.status, JSON.stringify(res.body)).toBe(202);
      const jobId = webhookJobId(id);
      await expect
        .poll(() => jobState(system.queue('seat-changes'), jobId), {
          timeout: 15_000,
          interval: 30,
        })
        .toMatch(/^(completed|failed)$/);
      await quiesce(system, parent);
      const after = await system.chain(parent);
      const mine = after.history.filter(
        (h) => h.cause.webhookId === id && h.event !== 'seats.buying',
      );
      const lastEntry = mine.at(-1)?.event;
      const outcome: ModelEvent['outcome'] =
        lastEntry === 'seats.stale'
          ? 'stale'
          : lastEntry === 'seats.ignored'
            ? 'ignored'
            : lastEntry === 'seats.refused'
              ? 'refused'
              : lastEntry === undefined
                ? 'unknown'
                : 'applied';
      log.push(
        `    -> ${mine.map((h) => `${h.event}: ${h.detail}`).join(' | ') || '(no history entry)'}`,
      );
      const O = occurredAt ?? now;
      const expectStale = lastAppliedO !== null && O < lastAppliedO;
      if (outcome === 'unknown' || outcome === 'refused' || expectStale !== (outcome === 'stale')) {
        throw new Error(
          `event ${describe}: outcome ${outcome}, model expected ${expectStale ? 'stale' : 'not stale'}\n${log.join('\n')}`,
        );
      }
      if (outcome !== 'stale') lastAppliedO = Math.max(lastAppliedO ?? O, O);
      ctx.events.push({
        id,
        total: action.total,
        eff,
        action: k,
        processedAt: now,
        needed: Math.max(needed, now),
        afterTerm: needed >= termEnd,
        outcome,
        aheadTermStart: before.term.startsAt > now ? before.term.startsAt : null,
        describe,
      });
    }
  }
  await settlePurchasesToCome(system, clock, parent, log, rel);
  ctx.seqBefore[sc.actions.length] = await seqNow();
  await quiesce(system, parent);
  const orders = await familyOrders(system, parent);
  const view = await system.chain(parent);
  const stored = await new ChainStore(system.started.runtime.redis).get(chainIdOf(parent));
  const pending = stored?.pendingAddOn ?? null;
  const problems = checkAll(ctx, orders, view, pending, clock.now());
  if (problems.length > 0 || process.env.STORM_DEBUG) {
    const ordersText = orders
      .map(
        (o) =>
          `  ${o.remoteId.padEnd(parent.length + 6)} ${String(o.licenses).padStart(3)}  ${rel(o.startsAt)} – ${rel(o.expiresAt)}  ${o.status} (${o.id}, created ${rel(o.createdAt)})`,
      )
      .join('\n');
    const report = `${variant.name}: ${problems.join('\n')}\n--- steps (t0 = ${formatInstant(t0)})\n${log.join('\n')}\n--- orders\n${ordersText}\n--- chain: next ${view.nextLicenses}, term ${view.term.orderId} ${rel(view.term.startsAt)} – ${rel(view.term.expiresAt)}, status ${view.status}, autoRenew ${view.autoRenew}; add-ons ${view.addOns
      .map(
        (a) =>
          `${a.order} lic ${a.licenses} next ${a.nextLicenses} ${rel(a.term.startsAt)}–${rel(a.term.expiresAt)} ${a.status}`,
      )
      .join('; ')}; pending ${JSON.stringify(pending)}\n--- now ${rel(clock.now())}`;
    if (problems.length > 0) throw new Error(report);
    console.log(report);
  }
}

// --- the variants --------------------------------------------------------------------------------

const variants: {
  name: string;
  key: string;
  env: Record<string, string>;
  external: boolean;
  style: 'coterm' | 'addon';
}[] = [
  {
    name: 'marketplace, co-terminated partials',
    key: 'coterm',
    env: {},
    external: false,
    style: 'coterm' as const,
  },
  {
    name: 'marketplace, SEAT_INCREASE=addon',
    key: 'addon',
    env: { SEAT_INCREASE: 'addon' },
    external: false,
    style: 'addon' as const,
  },
  {
    name: 'external variant',
    key: 'external',
    env: { PARTNER_VARIANT: 'external' },
    external: true,
    style: 'addon' as const,
  },
];

for (const variant of variants) {
  const skip = ONLY !== undefined && ONLY !== variant.key;
  describe.skipIf(skip)(`seat storm: ${variant.name}`, () => {
    const clock = manualClock(systemClock.now());
    const system = useSystem({ clock, env: variant.env });

    it('keeps every promise of the seat rules through random events and clock moves', async () => {
      const withAutoRenew = process.env.STORM_AUTORENEW !== '0';
      // STORM_SCENARIO replays one scenario as printed in a counterexample (its JSON object).
      const replay = process.env.STORM_SCENARIO;
      const scenarios = replay
        ? fc.constant(JSON.parse(replay) as Scenario)
        : scenarioArb(withAutoRenew);
      await fc.assert(
        fc.asyncProperty(scenarios, (sc) => runScenario(system, clock, variant, sc)),
        {
          numRuns: replay ? 1 : RUNS,
          seed: SEED,
          interruptAfterTimeLimit: Number(process.env.STORM_SHRINK_MS ?? 240_000),
          markInterruptAsFailure: false,
        },
      );
    }, 600_000);
  });
}
