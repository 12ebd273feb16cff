// The ops API (DESIGN §5): operators look at chains, switch auto-renewal, cancel, reactivate.
import type { Queue } from 'bullmq';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { ensureRenewalJob } from '../../jobs/renewals.js';
import { cancelChain } from '../chains/cancel.js';
import type { Cause, Chain } from '../chains/records.js';
import type { ChainStore } from '../chains/store.js';
import { type ChainView, chainView } from '../chains/view.js';
import type { ProvisioningClient } from '../client/provisioning-client.js';
import type { Clock } from '../clock.js';
import { SECONDS_PER_DAY } from '../domain/periods.js';
import { nextRenewalAt } from '../domain/renewal.js';
import { ConfigError, NotFoundError, RefusalError, TransientError } from '../errors.js';
import { isRedisUnavailable } from '../redis/connection.js';
import { describeIssues } from '../validation.js';
import { requireOpsToken } from './auth.js';
import { withOperatorLock } from './operator-lock.js';

export interface OpsDeps {
  chains: ChainStore;
  renewals: Queue;
  provisioning: ProvisioningClient;
  clock: Clock;
  token: string;
  leadDays: number;
}

const orderParam = z.object({ order: z.string().min(1).max(128) });
const customerParam = z.object({ customer: z.string().min(1).max(128) });
const autoRenewBody = z.strictObject(
  { enabled: z.boolean('must be a boolean') },
  'must be {"enabled": true|false}',
);
const renewalsQuery = z.strictObject({
  within: z.coerce
    .number('must be a number of days')
    .int('must be a whole number of days')
    .min(0, 'must not be negative')
    .max(3660, 'must be at most 3660 days')
    .default(7),
});
const operatorHeader = z.string().min(1).max(100).default('ops-api');

class InvalidRequest extends RefusalError {}

function parse<T>(schema: z.ZodType<T>, value: unknown, where: string): T {
  const parsed = schema.safeParse(value, { reportInput: true });
  if (!parsed.success)
    throw new InvalidRequest('invalid_request', describeIssues(parsed.error, where));
  return parsed.data;
}

function sendError(reply: FastifyReply, status: number, error: string, message: string) {
  return reply.code(status).send({ error, message });
}

export function opsRoutes(deps: OpsDeps) {
  const { chains, clock } = deps;

  async function viewOf(chain: Chain): Promise<ChainView> {
    const addOns = await chains.getMany(chain.addOns);
    const [history, ...addOnHistories] = await Promise.all([
      chains.history(chain.id),
      ...addOns.map((a) => chains.history(a.id)),
    ]);
    return chainView(
      { chain, history: history ?? [] },
      addOns.map((a, i) => ({ chain: a, history: addOnHistories[i] ?? [] })),
    );
  }

  async function chainOf(order: string): Promise<Chain> {
    const chain = await chains.getByOrder(order);
    if (!chain) throw new NotFoundError('chain_not_found', `no chain has an order ${order}`);
    return chain;
  }

  function causeOf(request: FastifyRequest): Cause {
    return { operator: parse(operatorHeader, request.headers['x-operator'], 'x-operator') };
  }

  return async function plugin(app: FastifyInstance) {
    app.addHook('onRequest', requireOpsToken(deps.token));
    app.setErrorHandler((error: FastifyError, request, reply) => {
      if (error instanceof NotFoundError) return sendError(reply, 404, error.code, error.message);
      if (error instanceof InvalidRequest) return sendError(reply, 400, error.code, error.message);
      if (error instanceof RefusalError) {
        request.log.warn({ code: error.code, refusal: error.message }, 'ops request refused');
        return sendError(reply, error.code === 'chain_busy' ? 409 : 422, error.code, error.message);
      }
      if (error instanceof TransientError || isRedisUnavailable(error)) {
        request.log.warn({ err: error }, 'ops request failed for now');
        return sendError(reply, 503, 'unavailable', error.message);
      }
      if (error instanceof ConfigError) {
        request.log.error({ err: error }, 'ops request failed: configuration');
        return sendError(reply, 502, error.code, error.message);
      }
      const status = error.statusCode ?? 500;
      if (status < 500)
        return sendError(reply, status === 415 ? 400 : status, 'invalid_request', error.message);
      request.log.error({ err: error }, 'ops request failed');
      return sendError(reply, 500, 'internal', 'internal error');
    });

    app.get('/ops/chains/:order', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      return viewOf(await chainOf(order));
    });

    app.put('/ops/chains/:order/auto-renew', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      const { enabled } = parse(autoRenewBody, request.body, 'body');
      const cause = causeOf(request);
      const found = await chainOf(order);
      const saved = await withOperatorLock(chains, found.id, async ({ chain, token }) => {
        if (chain.autoRenew === enabled) return chain;
        const now = clock.now();
        const updated = { ...chain, autoRenew: enabled, updatedAt: now };
        const next = {
          ...updated,
          nextRenewalAt: nextRenewalAt({ chain: updated, now, leadDays: deps.leadDays }),
        };
        return chains.save({
          chainId: chain.id,
          token,
          previous: chain,
          next,
          history: [
            {
              at: now,
              event: enabled ? 'auto_renew.enabled' : 'auto_renew.disabled',
              detail: enabled ? 'auto-renewal switched on' : 'auto-renewal switched off',
              cause,
            },
          ],
          release: false,
        });
      });
      await ensureRenewalJob(deps.renewals, saved, clock.now());
      return viewOf(saved);
    });

    app.post('/ops/chains/:order/cancel', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      const cause = causeOf(request);
      const found = await chainOf(order);
      const saved = await withOperatorLock(chains, found.id, async ({ chain, token }) => {
        if (chain.status === 'cancelled') return chain;
        return cancelChain({
          chains,
          provisioning: deps.provisioning,
          held: { chain, token },
          now: clock.now(),
          cause,
          reason: 'cancelled by an operator',
        });
      });
      await ensureRenewalJob(deps.renewals, saved, clock.now());
      return viewOf(saved);
    });

    app.post('/ops/chains/:order/reactivated', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      const cause = causeOf(request);
      const found = await chainOf(order);
      const saved = await withOperatorLock(chains, found.id, async ({ chain, token }) => {
        if (chain.status === 'cancelled') {
          throw new RefusalError(
            'chain_cancelled',
            `chain ${chain.order} is cancelled and cannot be reactivated`,
          );
        }
        if (chain.status !== 'suspended' && !chain.needsReactivation) return chain;
        const now = clock.now();
        const updated: Chain = {
          ...chain,
          status: chain.term.expiresAt <= now ? 'expired' : 'active',
          needsReactivation: false,
          updatedAt: now,
        };
        return chains.save({
          chainId: chain.id,
          token,
          previous: chain,
          next: {
            ...updated,
            nextRenewalAt: nextRenewalAt({ chain: updated, now, leadDays: deps.leadDays }),
          },
          history: [
            {
              at: now,
              event: 'chain.reactivated',
              detail: 'an operator confirmed the manual reactivation at the provider',
              cause,
            },
          ],
          release: false,
        });
      });
      await ensureRenewalJob(deps.renewals, saved, clock.now());
      return viewOf(saved);
    });

    app.get('/ops/customers/:customer/chains', async (request) => {
      const { customer } = parse(customerParam, request.params, 'params');
      const all = await chains.listByCustomer(customer);
      return { chains: await Promise.all(all.filter((c) => c.mainChain === null).map(viewOf)) };
    });

    app.get('/ops/renewals', async (request) => {
      const { within } = parse(renewalsQuery, request.query, 'query');
      const due = await chains.dueUntil(clock.now() + within * SECONDS_PER_DAY);
      return {
        renewals: due
          .filter((c) => c.nextRenewalAt !== null)
          .map((c) => ({
            order: c.order,
            customer: c.customer,
            dueAt: c.nextRenewalAt as number,
            expiresAt: c.term.expiresAt,
          }))
          .sort((a, b) => a.dueAt - b.dueAt || a.order.localeCompare(b.order)),
      };
    });
  };
}
