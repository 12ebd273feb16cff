// The ops API (DESIGN §5): operators look at chains, switch auto-renewal, cancel, reactivate.
import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Cause } from '../chains/records.js';
import {
  ConfigError,
  InvalidRequestError,
  MalformedAnswerError,
  NotFoundError,
  RefusalError,
  TransientError,
} from '../errors.js';
import { sendError, sendUnrecognisedError } from '../http-errors.js';
import { utf8Header } from '../http-headers.js';
import { isRedisUnavailable } from '../redis/connection.js';
import { decimalDigits, describeIssues, operatorNameRule } from '../validation.js';
import { requireOpsToken } from './auth.js';
import {
  type ChainOperationsDeps,
  dueCursorFromText,
  dueCursorText,
  makeChainOperations,
} from './chain-operations.js';

export interface OpsDeps extends ChainOperationsDeps {
  token: string;
}

const orderParam = z.object({ order: z.string().min(1).max(128) });
const customerParam = z.object({ customer: z.string().min(1).max(128) });
const customerChainsQuery = z.strictObject({ after: z.string().min(1).max(128).optional() });
/** Actions that take no input: a body, if sent at all, is `{}` (a typo'd option is refused). */
const noBody = z.strictObject({}).optional();
/**
 * A query where a route reads none: an option sent there (`cancel?dryRun=true`) is refused, not
 * ignored while the change it was meant to qualify goes ahead.
 */
const noQuery = z.strictObject({});
const autoRenewBody = z.strictObject(
  { enabled: z.boolean('must be a boolean') },
  'must be {"enabled": true|false}',
);
const renewalsQuery = z.strictObject({
  within: z
    .preprocess(
      decimalDigits,
      z.int('must be a whole number of days').min(0).max(3660, 'must be at most 3660 days'),
    )
    .default(7),
  after: dueCursorFromText.optional(),
});
const operatorHeader = operatorNameRule.default('ops-api');

function parse<T>(schema: z.ZodType<T>, value: unknown, where: string): T {
  const parsed = schema.safeParse(value, { reportInput: true });
  if (!parsed.success) throw new InvalidRequestError(describeIssues(parsed.error, where));
  return parsed.data;
}

export function opsRoutes(deps: OpsDeps) {
  const operations = makeChainOperations(deps);

  function causeOf(request: FastifyRequest): Cause {
    const operator = request.headers['x-operator'];
    const written = typeof operator === 'string' ? utf8Header(operator) : operator;
    return { operator: parse(operatorHeader, written, 'x-operator') };
  }

  return async function plugin(app: FastifyInstance) {
    app.addHook('onRequest', requireOpsToken(deps.token));
    app.setErrorHandler((error: FastifyError, request, reply) => {
      if (error instanceof NotFoundError) return sendError(reply, 404, error.code, error.message);
      if (error instanceof InvalidRequestError)
        return sendError(reply, 400, error.code, error.message);
      if (error instanceof RefusalError) {
        request.log.warn({ code: error.code, refusal: error.message }, 'ops request refused');
        return sendError(reply, error.code === 'chain_busy' ? 409 : 422, error.code, error.message);
      }
      if (error instanceof TransientError) {
        request.log.warn({ err: error }, 'ops request failed for now');
        return sendError(reply, 503, 'unavailable', error.message);
      }
      if (isRedisUnavailable(error)) {
        // ioredis's own words ("Stream isn't writeable ...") tell an operator nothing: the log has them.
        request.log.warn({ err: error }, 'ops request failed for now');
        return sendError(reply, 503, 'unavailable', 'storage unreachable, retry later');
      }
      if (error instanceof ConfigError) {
        request.log.error({ err: error }, 'ops request failed: configuration');
        return sendError(reply, 502, error.code, error.message);
      }
      if (error instanceof MalformedAnswerError) {
        request.log.error({ err: error }, 'ops request failed: the provider answered nonsense');
        return sendError(reply, 502, error.code, error.message);
      }
      return sendUnrecognisedError(error, request, reply, 'ops request failed');
    });

    app.get('/ops/chains/:order', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      parse(noQuery, request.query, 'query');
      return operations.show(order);
    });

    app.put('/ops/chains/:order/auto-renew', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      parse(noQuery, request.query, 'query');
      const { enabled } = parse(autoRenewBody, request.body, 'body');
      return operations.setAutoRenew(order, enabled, causeOf(request));
    });

    app.post('/ops/chains/:order/cancel', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      parse(noQuery, request.query, 'query');
      parse(noBody, request.body, 'body');
      return operations.cancel(order, causeOf(request));
    });

    app.post('/ops/chains/:order/reactivated', async (request) => {
      const { order } = parse(orderParam, request.params, 'params');
      parse(noQuery, request.query, 'query');
      parse(noBody, request.body, 'body');
      return operations.reactivated(order, causeOf(request));
    });

    app.get('/ops/customers/:customer/chains', async (request) => {
      const { customer } = parse(customerParam, request.params, 'params');
      const { after } = parse(customerChainsQuery, request.query, 'query');
      return operations.ofCustomer(customer, after);
    });

    app.get('/ops/renewals', async (request) => {
      const { within, after } = parse(renewalsQuery, request.query, 'query');
      const { renewals, next } = await operations.upcoming(within, after);
      return { renewals, next: next && dueCursorText(next) };
    });
  };
}
