// The `billing` command: start the service and manage partner accounts.
import { userInfo } from 'node:os';
import { Queue } from 'bullmq';
import { Argument, Command, Option } from 'commander';
import { describeSettings, loadSettings, type Settings } from '../config/settings.js';
import { ChainStore } from './chains/store.js';
import type { ChainView } from './chains/view.js';
import { openRuntime, type Runtime } from './embedded.js';
import { ConfigError, RefusalError, TransientError } from './errors.js';
import { formatInstant } from './format.js';
import { createLogger, type Logger } from './logger.js';
import { type Role, start } from './main.js';
import {
  type ChainOperations,
  makeChainOperations,
  UPCOMING_LIMIT,
} from './ops/chain-operations.js';
import { variants } from './provisioning/schemas.js';
import { workersSide } from './provisioning-client-factory.js';
import { QUEUE_PREFIX, QUEUES } from './queues.js';
import { isRedisUnavailable } from './redis/connection.js';
import { describeRedisTarget } from './redis/target.js';
import { decimalDigits, operatorNameRule, UNPRINTABLE } from './validation.js';

function settingsOrExit(): Settings {
  try {
    return loadSettings(process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
}

/**
 * Runs a command with a runtime open, and closes it (and a Redis it started) afterwards. The
 * command gets the settings the runtime was opened with, read once.
 */
async function withRuntime<T>(
  run: (runtime: Runtime, settings: Settings) => Promise<T>,
): Promise<T> {
  const settings = settingsOrExit();
  // The CLI's own logs would clutter its output: only warnings and errors, on stderr.
  const log: Logger = createLogger('warn', process.stderr);
  const runtime = await openRuntime(settings, log);
  if (runtime.startedPrivateRedis !== null) {
    // No service runs on DATA_DIR's Redis: the one the person means may be elsewhere.
    process.stderr.write(
      `billing: REDIS_URL is not set and no service runs the private Redis of DATA_DIR=${settings.DATA_DIR}: ` +
        `this command started it (${runtime.startedPrivateRedis}) and works on its data. ` +
        'For a service started with REDIS_URL, set REDIS_URL for this command too.\n',
    );
  }
  try {
    return await run(runtime, settings);
  } finally {
    await runtime.close();
  }
}

function printTable(rows: readonly Record<string, string | number>[]): void {
  if (rows.length === 0) {
    process.stdout.write('(none)\n');
    return;
  }
  const columns = Object.keys(rows[0] ?? {});
  const widths = columns.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c]).length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => cell.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  process.stdout.write(`${line(columns)}\n`);
  for (const row of rows) process.stdout.write(`${line(columns.map((c) => String(row[c])))}\n`);
}

/** A flag's whole number in min..max, written in decimal digits (as settings are), or null. */
function wholeNumberIn(value: string, min: number, max: number): number | null {
  const n = decimalDigits(value);
  return typeof n === 'number' && n >= min && n <= max ? n : null;
}

const positiveInt = (name: string) => (value: string) => {
  const days = wholeNumberIn(value, 1, 365);
  if (days === null) {
    throw new ConfigError(
      'invalid_flag',
      `${name} must be an integer from 1 to 365, got ${JSON.stringify(value)}`,
    );
  }
  return days;
};

export function buildCli(): Command {
  const program = new Command('billing')
    .description('Billing-cycle automation: embedded provisioning core and renewal workers')
    .addHelpText('after', `\nSettings (environment variables):\n${describeSettings()}\n`)
    .showHelpAfterError();

  program
    .command('start')
    .description('start the service (embedded default: HTTP API with the provisioning core)')
    .addOption(
      new Option('--role <role>', 'which parts to run')
        .choices(['api', 'worker', 'all'])
        .default('all'),
    )
    .action(async (opts: { role: Role }) => {
      const settings = settingsOrExit();
      const log = createLogger(settings.LOG_LEVEL);
      await start(settings, log, opts.role, {
        stopOnSignalsWithin: settings.SHUTDOWN_TIMEOUT_SECONDS + 10,
      });
    });

  const partners = program
    .command('partners')
    .description('partner accounts of the embedded provisioning core')
    .hook('preAction', () => {
      if (settingsOrExit().remote) {
        throw new ConfigError(
          'remote_mode',
          'partners belong to the embedded provisioning core, which remote mode (PROVISIONING_URL) does not serve: the remote service keeps its own',
        );
      }
    });
  partners
    .command('add')
    .description('create a partner and print its API key (shown once)')
    .requiredOption('--name <name>', 'unique partner name')
    .addOption(
      new Option('--variant <variant>', 'interface variant')
        .choices(variants)
        .makeOptionMandatory(),
    )
    .option(
      '--renewal-window-days <days>',
      'renewal window in days (default 15)',
      positiveInt('--renewal-window-days'),
    )
    .option('--json', 'print {"name","variant","apiKey"} on one line')
    .action(
      async (opts: {
        name: string;
        variant: 'marketplace' | 'external';
        renewalWindowDays?: number;
        json?: boolean;
      }) => {
        const { name } = opts;
        // Counted in characters, as the settings count PARTNER_NAME (an emoji is one).
        const length = [...name].length;
        if (length === 0 || length > 200) {
          throw new ConfigError(
            'invalid_flag',
            `--name must be 1..200 characters, got ${JSON.stringify(opts.name)}`,
          );
        }
        // Partners are found by their exact name (set-window, PARTNER_NAME): a name kept other
        // than as typed would be one nobody finds by typing it again.
        if (name.trim() !== name) {
          throw new ConfigError(
            'invalid_flag',
            `--name must not start or end with white space, got ${JSON.stringify(opts.name)}`,
          );
        }
        // `partners list` prints it: a tab or a bidi override would garble the table.
        if (UNPRINTABLE.test(name)) {
          throw new ConfigError(
            'invalid_flag',
            `--name must not contain control or format characters, got ${JSON.stringify(opts.name)}`,
          );
        }
        const { partner, apiKey, settings } = await withRuntime(async (rt, settings) => {
          // A key hashed with another secret than the API's would be printed and never work.
          await rt.holdKeyHashSecret();
          const created = await rt.partners.create({
            name,
            variant: opts.variant,
            renewalWindowDays: opts.renewalWindowDays,
            now: rt.clock.now(),
          });
          return { ...created, settings };
        });
        if (partner.name === settings.PARTNER_NAME) {
          // The service makes its own partner at start, held to its settings.
          process.stderr.write(
            partner.variant !== settings.PARTNER_VARIANT
              ? `billing: ${partner.name} is the workers' partner (PARTNER_NAME), and the service starts only with PARTNER_VARIANT=${partner.variant} now (it is ${settings.PARTNER_VARIANT}): set it, or choose another name for this partner.\n`
              : partner.renewalWindowDays !== settings.PARTNER_RENEWAL_WINDOW_DAYS
                ? `billing: ${partner.name} is the workers' partner (PARTNER_NAME): the service's next start sets its window to PARTNER_RENEWAL_WINDOW_DAYS=${settings.PARTNER_RENEWAL_WINDOW_DAYS}; set PARTNER_RENEWAL_WINDOW_DAYS=${partner.renewalWindowDays} to keep it.\n`
                : `billing: ${partner.name} is the workers' partner (PARTNER_NAME): the service acts for it.\n`,
          );
        }
        if (opts.json) {
          process.stdout.write(
            `${JSON.stringify({ name: partner.name, variant: partner.variant, apiKey })}\n`,
          );
          return;
        }
        process.stdout.write(
          `Created partner ${partner.name} (${partner.variant}, renewal window ${partner.renewalWindowDays} days).\n` +
            `API key (shown once, keep it safe):\n${apiKey}\n`,
        );
      },
    );
  partners
    .command('set-window')
    .description("change a partner's renewal window (takes effect on its next call)")
    .requiredOption('--name <name>', 'the partner')
    .requiredOption('--days <days>', 'renewal window in days', positiveInt('--days'))
    .option('--json', 'print {"name","renewalWindowDays","before"} on one line')
    .action(async (opts: { name: string; days: number; json?: boolean }) => {
      const { before, partner, settings } = await withRuntime(async (rt, settings) => {
        // The workers renew their partner's chains RENEWAL_LEAD_DAYS before a term ends: a
        // shorter window would have the provider refuse those renewals until the term ends.
        if (opts.name === settings.PARTNER_NAME && opts.days < settings.RENEWAL_LEAD_DAYS) {
          throw new RefusalError(
            'window_shorter_than_lead',
            `--days ${opts.days}: ${opts.name} is the workers' partner (PARTNER_NAME), and they renew RENEWAL_LEAD_DAYS=${settings.RENEWAL_LEAD_DAYS} days before a term ends, which a shorter window refuses; lower RENEWAL_LEAD_DAYS first (both settings: the service's next start applies PARTNER_RENEWAL_WINDOW_DAYS)`,
          );
        }
        return { ...(await rt.partners.setRenewalWindow(opts.name, opts.days)), settings };
      });
      if (
        partner.name === settings.PARTNER_NAME &&
        partner.renewalWindowDays !== settings.PARTNER_RENEWAL_WINDOW_DAYS
      ) {
        // The service sets its own partner's window at every start (the setting wins).
        process.stderr.write(
          `billing: ${partner.name} is the workers' partner (PARTNER_NAME): running workers keep the window they started with, and the service's next start sets it back to PARTNER_RENEWAL_WINDOW_DAYS=${settings.PARTNER_RENEWAL_WINDOW_DAYS}; set PARTNER_RENEWAL_WINDOW_DAYS=${partner.renewalWindowDays} to keep it.\n`,
        );
      }
      if (opts.json) {
        const changed = {
          name: partner.name,
          renewalWindowDays: partner.renewalWindowDays,
          before,
        };
        process.stdout.write(`${JSON.stringify(changed)}\n`);
        return;
      }
      process.stdout.write(
        `Partner ${partner.name}: renewal window ${partner.renewalWindowDays} days (was ${before}).\n`,
      );
    });
  partners
    .command('list')
    .description('list partners (never their keys)')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      const all = await withRuntime((rt) => rt.partners.list());
      if (opts.json) {
        process.stdout.write(`${JSON.stringify({ partners: all })}\n`);
        return;
      }
      printTable(
        all.map((p) => ({
          id: p.id,
          name: p.name,
          variant: p.variant,
          'window(days)': p.renewalWindowDays,
          created: new Date(p.createdAt * 1000).toISOString(),
        })),
      );
    });
  addOrderCommands(program);
  addChainCommands(program);
  return program;
}

/** The embedded provider's own staff's actions on orders, which the partner interface lacks. */
function addOrderCommands(program: Command): void {
  program
    .command('orders')
    .description("orders of the embedded provider: its own staff's actions")
    .command('reactivate')
    .description(
      "reactivate an external partner's suspended orders by hand at the embedded provider (each names its whole chain)",
    )
    .argument('<orders...>', 'order ids, as a reactivation.needed history entry lists them')
    .option('--partner <name>', 'the partner whose orders they are (default: PARTNER_NAME)')
    .option('--json', 'print each order as JSON, one per line')
    .hook('preAction', () => {
      // Before Redis is opened (or a private one started) just to refuse.
      if (settingsOrExit().remote) {
        throw new ConfigError(
          'remote_provider',
          'PROVISIONING_URL is set: the workers drive a remote provider, whose orders are reactivated with its own tools; this command reactivates orders of the embedded provider',
        );
      }
    })
    .action(async (orders: string[], opts: { partner?: string; json?: boolean }) => {
      await withRuntime(async (rt, settings) => {
        const partner = await rt.partners.named(opts.partner ?? settings.PARTNER_NAME);
        // A marketplace partner has unsuspendOrder: its payment unsuspends its orders, and an
        // order reactivated behind the workers' back would stay active while they hold it
        // suspended for a payment still overdue.
        if (partner.variant !== 'external') {
          throw new RefusalError(
            'not_external',
            `${partner.name} is a marketplace partner: its orders are unsuspended through the interface (unsuspendOrder), as the workers do when its payment arrives`,
          );
        }
        // One at a time, each safe to repeat: after a refusal, the command can run again whole.
        for (const id of orders) {
          const order = await rt.core.reactivateOrder(partner, id);
          process.stdout.write(
            opts.json
              ? `${JSON.stringify(order)}\n`
              : `Order ${id} of ${partner.name} is ${order.status}, with every order of its chain.\n`,
          );
        }
      });
    });
}

/** Runs chain operations against the configured Redis, as the ops API would. */
async function withChainOperations<T>(run: (ops: ChainOperations) => Promise<T>): Promise<T> {
  return withRuntime(async (rt, settings) => {
    const queue = (name: string) =>
      // A failed call reports itself; without a listener BullMQ would also print the connection's
      // errors, with the failed command's arguments (a password), on stderr.
      new Queue(name, { connection: rt.redis, prefix: QUEUE_PREFIX }).on('error', () => {});
    const renewals = queue(QUEUES.renewals);
    const paymentSignals = queue(QUEUES.paymentSignals);
    const { clock, variant, fromSetting } = await workersSide(settings, rt);
    try {
      const chains = new ChainStore(rt.redis);
      return await run(
        makeChainOperations({
          variant,
          chains,
          renewals,
          paymentSignals,
          clock,
          leadDays: settings.RENEWAL_LEAD_DAYS,
        }),
      );
    } catch (error) {
      // A variant from this command's setting (remote mode, or no partner of its PARTNER_NAME
      // here) may not be the service's: say which settings it read.
      if (error instanceof RefusalError && error.code === 'not_external' && fromSetting) {
        const read = settings.remote
          ? `PARTNER_VARIANT=${settings.PARTNER_VARIANT}`
          : `PARTNER_VARIANT=${settings.PARTNER_VARIANT}, as no partner is named PARTNER_NAME=${settings.PARTNER_NAME} here`;
        throw new RefusalError(
          error.code,
          `${error.message} (this command read ${read}: run it with the service's settings)`,
        );
      }
      throw error;
    } finally {
      await Promise.all([renewals.close(), paymentSignals.close()]);
    }
  });
}

/** What the license line leaves to the lines below it: partials and add-ons still going. */
function alsoBelow(chain: ChainView): string {
  const addOns = chain.addOns.some((a) => a.status === 'active' || a.status === 'suspended');
  if (chain.partials.length > 0 && addOns) return ' (partials and add-ons below)';
  if (chain.partials.length > 0) return ' (partials below)';
  return addOns ? ' (add-ons below)' : '';
}

const iso = (epochSeconds: number | null) =>
  epochSeconds === null ? '-' : formatInstant(epochSeconds);

/** ", 2 from <date>": what renewals carry once a decrease needed from a later date applies. */
function laterCounts(chain: Pick<ChainView, 'laterLicenses'>): string {
  return chain.laterLicenses.map((l) => `, ${l.licenses} from ${iso(l.from)}`).join('');
}

/**
 * `chain` as a person reads it; `mainOrder` is the order that governs it (its main chain's, for
 * an add-on shown by its own order), which a command the output advises must name.
 */
function printChain(chain: ChainView, mainOrder: string): void {
  const lines = [
    `chain     ${chain.order} (customer ${chain.customer})`,
    `product   ${chain.product}, ${chain.duration}`,
    `status    ${chain.status}, payment ${chain.payment}, auto-renew ${chain.autoRenew ? 'on' : 'off'}`,
    // The main order of the latest term, which may start later: partials and add-ons add theirs.
    `licenses  ${chain.licenses} in ${chain.term.orderId}${alsoBelow(chain)}, ${chain.nextLicenses} at the next renewal${laterCounts(chain)}`,
    `term      #${chain.term.count} ${chain.term.orderId}: ${iso(chain.term.startsAt)} – ${iso(chain.term.expiresAt)}`,
    `renews    ${iso(chain.nextRenewalAt)}`,
  ];
  // A cancelled chain has nothing to reactivate (records from before the cancel cleared it).
  if (chain.needsReactivation && chain.status !== 'cancelled') {
    lines.push(
      chain.payment === 'overdue'
        ? `action    payment overdue again: confirm the reactivation before its grace period ends, or once paid: billing chains reactivated ${mainOrder}`
        : `action    reactivate it at the provider, then: billing chains reactivated ${mainOrder}`,
    );
  }
  if (chain.flagged) lines.push(`flagged   ${chain.flagged}`);
  if (chain.inFlight) {
    lines.push(
      `in flight ${chain.inFlight.kind} ${chain.inFlight.orderId}, finished by the next job`,
    );
  }
  for (const p of chain.partials) {
    lines.push(
      `partial   ${p.orderId}: ${p.licenses} licenses, ${iso(p.startsAt)} – ${iso(p.expiresAt)}`,
    );
  }
  for (const a of chain.addOns) {
    lines.push(
      `add-on    ${a.order}: ${a.licenses} licenses (${a.nextLicenses} next${laterCounts(a)}), term #${a.term.count} to ${iso(a.term.expiresAt)}, ${a.status}`,
    );
  }
  process.stdout.write(`${lines.join('\n')}\n\nhistory\n`);
  printTable(
    chain.history.map((h) => ({
      at: iso(h.at),
      event: h.event,
      detail: h.detail,
      cause: Object.entries(h.cause)
        .map(([k, v]) => `${k}=${v}`)
        .join(' '),
    })),
  );
}

const operator = () => ({ operator: `cli:${osUser()}` });

/** Who runs the command, for the history: a container's user id may have no passwd entry. */
function osUser(): string {
  let username: string | undefined;
  try {
    username = userInfo().username;
  } catch {
    // No passwd entry: USER or LOGNAME, from the environment.
  }
  return operatorName([username, process.env.USER, process.env.LOGNAME], process.getuid?.());
}

/**
 * The first name that the ops API would take as `x-operator` (1..100 characters, none a control
 * or format character, which would garble `chains show`), else the user id: the environment's
 * USER can hold anything.
 */
export function operatorName(candidates: readonly (string | undefined)[], uid?: number): string {
  const fits = (name: string | undefined): name is string =>
    operatorNameRule.safeParse(name).success;
  return candidates.find(fits) ?? `uid:${uid ?? 'unknown'}`;
}

function parseDays(value: string): number {
  const days = wholeNumberIn(value, 0, 3660);
  if (days === null) {
    throw new ConfigError(
      'invalid_flag',
      `--within must be a whole number of days (0..3660), got ${JSON.stringify(value)}`,
    );
  }
  return days;
}

function addChainCommands(program: Command): void {
  const chains = program.command('chains').description('order chains the workers keep');
  chains
    .command('show')
    .description('show a chain (name any of its order ids) with its history')
    .argument('<order>', 'an order id of the chain')
    .option('--json', 'print JSON')
    .action(async (order: string, opts: { json?: boolean }) => {
      const { view, mainOrder } = await withChainOperations((ops) => ops.showWithMainOrder(order));
      if (opts.json) process.stdout.write(`${JSON.stringify(view)}\n`);
      else printChain(view, mainOrder);
    });
  chains
    .command('auto-renew')
    .description('switch auto-renewal of a chain on or off')
    .argument('<order>', 'an order id of the chain')
    .addArgument(new Argument('<state>', 'on or off').choices(['on', 'off']))
    .option('--json', 'print JSON')
    .action(async (order: string, state: 'on' | 'off', opts: { json?: boolean }) => {
      const chain = await withChainOperations((ops) =>
        ops.setAutoRenew(order, state === 'on', operator()),
      );
      if (opts.json) process.stdout.write(`${JSON.stringify(chain)}\n`);
      else printChain(chain, chain.order); // an add-on's order is refused: a main chain
    });
  chains
    .command('reactivated')
    .description('confirm that a suspended chain was reactivated by hand at the provider')
    .argument('<order>', 'an order id of the chain')
    .option('--json', 'print JSON')
    .action(async (order: string, opts: { json?: boolean }) => {
      const chain = await withChainOperations((ops) => ops.reactivated(order, operator()));
      if (opts.json) process.stdout.write(`${JSON.stringify(chain)}\n`);
      else printChain(chain, chain.order); // an add-on's order is refused: a main chain
    });

  program
    .command('renewals')
    .description('renewals the workers will make')
    .command('upcoming')
    .description('renewals due within some days, earliest first')
    .option('--within <days>', 'how many days ahead', parseDays, 7)
    .option('--all', `every one, not only the first ${UPCOMING_LIMIT}`)
    .option('--json', 'print JSON')
    .action(async (opts: { within: number; all?: boolean; json?: boolean }) => {
      const { renewals, next } = await withChainOperations(async (ops) => {
        const first = await ops.upcoming(opts.within);
        let page = first;
        while (opts.all && page.next !== null) {
          page = await ops.upcoming(opts.within, page.next);
          first.renewals.push(...page.renewals);
        }
        return { renewals: first.renewals, next: page.next };
      });
      if (next !== null) {
        process.stderr.write(
          `billing: the first ${UPCOMING_LIMIT} renewals are listed, and more may be due within ${opts.within} day${opts.within === 1 ? '' : 's'}: --all lists every one\n`,
        );
      }
      if (opts.json) {
        process.stdout.write(`${JSON.stringify({ renewals })}\n`);
        return;
      }
      printTable(
        renewals.map((r) => ({
          due: iso(r.dueAt),
          order: r.order,
          customer: r.customer,
          expires: iso(r.expiresAt),
        })),
      );
    });
}

/** Which Redis a command could not reach, as its settings name it (no password). */
function redisNamed(): string {
  const url = process.env.REDIS_URL;
  if (url === undefined || url === '') return 'cannot reach the private Redis of DATA_DIR';
  try {
    return `cannot reach the Redis of REDIS_URL=${describeRedisTarget(url)}`;
  } catch {
    return 'cannot reach the Redis of REDIS_URL';
  }
}

/**
 * The status of a command that could not do it now but may on its own later, the same command
 * run again (sysexits' EX_TEMPFAIL): a lock held, a provider or a busy chain. A script retries
 * on it, where status 2 (a refusal, a bad value) asks a person to change something first.
 */
const EXIT_TRY_LATER = 75;

function triesLater(error: unknown): error is Error {
  return (
    error instanceof TransientError ||
    (error instanceof RefusalError && error.code === 'chain_busy')
  );
}

export async function runCli(argv: readonly string[]): Promise<void> {
  // Output piped into a reader that stops early (`| head`) ends the command quietly instead of
  // with a stack trace, with the status of a process killed by SIGPIPE (128 + 13), as other
  // command-line tools do: a script with `pipefail` still sees that output was lost (say, a new
  // partner's API key).
  // The command still runs to its end, unheard, so it stops what it opened (a private Redis
  // started for it) and finishes what it was asked to do (the rest of the orders to reactivate);
  // the writes after the reader left go nowhere. The error may come only after the command has
  // returned: the status is set for the exit, whenever that is.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    process.exitCode = 141;
  });
  try {
    await buildCli().parseAsync([...argv]);
  } catch (error) {
    if (error instanceof ConfigError || error instanceof RefusalError || triesLater(error)) {
      process.stderr.write(`billing: ${error.message}\n`);
      process.exit(triesLater(error) ? EXIT_TRY_LATER : 2);
    }
    // Anything else (Redis unreachable, a port in use) is told by its message alone: Node's own
    // report would inspect the error, and a Redis error carries its command's arguments (a
    // password). LOG_LEVEL=debug adds the stack.
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(
      `billing: ${isRedisUnavailable(error) ? `${redisNamed()}: ` : ''}${message}\n`,
    );
    const verbose = ['debug', 'trace'].includes(process.env.LOG_LEVEL ?? '');
    if (verbose && error instanceof Error && error.stack) {
      process.stderr.write(`${error.stack}\n`);
    }
    process.exit(1);
  }
}
