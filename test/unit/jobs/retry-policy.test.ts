// The retry policy: waits that double up to a cap, forever for the world's failures, a bounded
// number of times in a row for unexpected ones.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ConfigError, MalformedAnswerError, TransientError } from '../../../src/errors.js';
import { isRedisUnavailable } from '../../../src/redis/connection.js';
import {
  JOB_ATTEMPTS,
  MAX_RETRY_DELAY_MS,
  retryDelayMs,
  UNEXPECTED_FAILURES_IN_A_ROW,
} from '../../../src/retry-policy.js';

const unavailable = new TransientError('provisioning_unavailable', 'answered 503');
const wrongKey = new ConfigError('provisioning_unauthorized', 'refused the API key (401)');
const redisAway = new TransientError('redis_unavailable', 'connect ECONNREFUSED 127.0.0.1:6379');
const bug = new TypeError("Cannot read properties of undefined (reading 'id')");
const notAnAnswer = new MalformedAnswerError(
  'provisioning createOrder answered 200 with a body that is not JSON',
);

const traces = (errors: Error[]) => errors.map((e) => e.stack ?? '');
const never = () => 0;

describe('retryDelayMs', () => {
  it('doubles from 2 s, each wait shortened by up to half', () => {
    expect([1, 2, 3, 4].map((n) => retryDelayMs(n, unavailable, [], never))).toEqual([
      2_000, 4_000, 8_000, 16_000,
    ]);
    expect(retryDelayMs(1, unavailable, [], () => 0.999_999)).toBe(1_000);
  });

  it('never waits more than 15 minutes, nor gives up, while a provider or Redis is away', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: JOB_ATTEMPTS }),
        fc.constantFrom(unavailable, wrongKey, redisAway),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (attempts, error, random) => {
          const earlier = traces(Array(11).fill(bug));
          const wait = retryDelayMs(attempts, error, earlier, () => random);
          expect(wait).toBeGreaterThan(0);
          expect(wait).toBeLessThanOrEqual(MAX_RETRY_DELAY_MS);
        },
      ),
    );
    // 10,000 attempts at the cap: months of outage before a job fails.
    expect((JOB_ATTEMPTS * MAX_RETRY_DELAY_MS) / 2 / 86_400_000).toBeGreaterThan(50);
  });

  it('waits at least what a provider asked for in its Retry-After, within the cap', () => {
    const asking = (ms: unknown) =>
      new TransientError('provisioning_unavailable', 'answered 429', { retryAfterMs: ms });
    expect(retryDelayMs(1, asking(60_000), [], never)).toBe(60_000);
    // Jobs turned away together come back spread over half as long again.
    expect(retryDelayMs(1, asking(60_000), [], () => 0.5)).toBe(75_000);
    expect(retryDelayMs(1, asking(3_600_000), [], never)).toBe(MAX_RETRY_DELAY_MS);
    // Asking for less than the backoff changes nothing; nonsense is ignored.
    expect(retryDelayMs(5, asking(1_000), [], never)).toBe(32_000);
    for (const nonsense of [0, -5, Number.NaN, '60000']) {
      expect(retryDelayMs(1, asking(nonsense), [], never)).toBe(2_000);
    }
  });

  it('fails after 12 unexpected failures in a row', () => {
    const eleven = traces(Array(UNEXPECTED_FAILURES_IN_A_ROW - 1).fill(bug));
    expect(retryDelayMs(11, bug, eleven.slice(1), never)).toBeGreaterThan(0);
    expect(retryDelayMs(12, bug, eleven)).toBe(-1);
    expect(retryDelayMs(12, notAnAnswer, eleven)).toBe(-1);
  });

  it('counts only the unexpected failures since the last outage one', () => {
    // An outage of 20 attempts, then the provider's first answer is not the interface's.
    const outage = traces(Array(20).fill(unavailable));
    expect(retryDelayMs(21, notAnAnswer, outage.slice(-12))).toBeGreaterThan(0);
    const then = [...outage, ...traces(Array(10).fill(notAnAnswer))].slice(-12);
    expect(retryDelayMs(31, notAnAnswer, then)).toBeGreaterThan(0);
    const more = [...then, ...traces([notAnAnswer])].slice(-12);
    expect(retryDelayMs(32, notAnAnswer, more)).toBe(-1);
  });
});

describe('isRedisUnavailable', () => {
  it("takes Redis's own words, not a provider's page that quotes them", () => {
    expect(isRedisUnavailable(new Error('LOADING Redis is loading the dataset in memory'))).toBe(
      true,
    );
    expect(isRedisUnavailable(new Error('connect ECONNREFUSED 127.0.0.1:6379'))).toBe(true);
    expect(isRedisUnavailable(new Error('Connection is closed.'))).toBe(true);
    const page = new Error(
      'provisioning createOrder answered 200 with a body that is not JSON: "<p>Loading...</p>"',
    );
    expect(isRedisUnavailable(page)).toBe(false);
    expect(isRedisUnavailable(new Error('answered 500: upstream READONLY mode, ECONNRESET'))).toBe(
      false,
    );
  });
});
