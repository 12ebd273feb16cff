// The retry policy: waits that double up to a cap, forever for the world's failures, a bounded
// number of times for unexpected ones.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ConfigError, TransientError } from '../../../src/errors.js';
import {
  JOB_ATTEMPTS,
  MAX_RETRY_DELAY_MS,
  retryDelayMs,
  UNEXPECTED_FAILURE_ATTEMPTS,
} from '../../../src/retry-policy.js';

const unavailable = new TransientError('provisioning_unavailable', 'answered 503');
const wrongKey = new ConfigError('provisioning_unauthorized', 'refused the API key (401)');
const redisAway = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), {
  code: 'ECONNREFUSED',
});
const bug = new TypeError("Cannot read properties of undefined (reading 'id')");

describe('retryDelayMs', () => {
  it('doubles from 2 s, each wait shortened by up to half', () => {
    expect([1, 2, 3, 4].map((n) => retryDelayMs(n, unavailable, () => 0))).toEqual([
      2_000, 4_000, 8_000, 16_000,
    ]);
    expect(retryDelayMs(1, unavailable, () => 0.999_999)).toBe(1_000);
  });

  it('never waits more than 15 minutes, nor gives up, while a provider or Redis is away', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: JOB_ATTEMPTS }),
        fc.constantFrom(unavailable, wrongKey, redisAway),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (attempts, error, random) => {
          const wait = retryDelayMs(attempts, error, () => random);
          expect(wait).toBeGreaterThan(0);
          expect(wait).toBeLessThanOrEqual(MAX_RETRY_DELAY_MS);
        },
      ),
    );
    // 10,000 attempts at the cap: months of outage before a job fails.
    expect((JOB_ATTEMPTS * MAX_RETRY_DELAY_MS) / 2 / 86_400_000).toBeGreaterThan(50);
  });

  it('fails an unexpected error after 12 attempts', () => {
    expect(retryDelayMs(UNEXPECTED_FAILURE_ATTEMPTS - 1, bug, () => 0)).toBeGreaterThan(0);
    expect(retryDelayMs(UNEXPECTED_FAILURE_ATTEMPTS, bug)).toBe(-1);
    expect(retryDelayMs(UNEXPECTED_FAILURE_ATTEMPTS, new Error('answered for "A-1"'))).toBe(-1);
  });
});
