// A worker process for the crash test: `billing start --role worker` with test-short timings.
import { loadSettings } from '../../../config/settings.js';
import { createLogger } from '../../../src/logger.js';
import { start } from '../../../src/main.js';

const settings = loadSettings(process.env);
await start(settings, createLogger(settings.LOG_LEVEL), 'worker', {
  stalledIntervalMs: Number(process.env.TEST_STALLED_INTERVAL_MS ?? 1000),
  lockLeaseMs: Number(process.env.TEST_LOCK_LEASE_MS ?? 2000),
  jobLockMs: Number(process.env.TEST_JOB_LOCK_MS ?? 2000),
});
process.stdout.write('worker ready\n');
