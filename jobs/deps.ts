// What every processor is built from: the stores, the provisioning client, time, logs, settings.
import type { Queue } from 'bullmq';
import type { Settings } from '../config/settings.js';
import type { ChainStore } from '../src/chains/store.js';
import type { ProvisioningClient } from '../src/client/provisioning-client.js';
import type { Clock } from '../src/clock.js';
import type { Logger } from '../src/logger.js';
import type { Metrics } from '../src/metrics.js';
import type { QueueName } from '../src/queues.js';

export interface WorkerSettings {
  leadDays: number;
  windowDays: number;
  autoRenewDefault: boolean;
  paymentGraceDays: number;
  seatIncrease: 'coterm' | 'addon';
  /** Whom the workers act for (PARTNER_NAME, or remote mode): what new chains are bound to. */
  provider: Pick<Settings, 'remote' | 'PARTNER_NAME'>;
}

/** The settings the processors read, from the parsed environment. */
export function workerSettingsFrom(settings: Settings): WorkerSettings {
  return {
    leadDays: settings.RENEWAL_LEAD_DAYS,
    windowDays: settings.PARTNER_RENEWAL_WINDOW_DAYS,
    autoRenewDefault: settings.AUTO_RENEW_DEFAULT,
    paymentGraceDays: settings.PAYMENT_GRACE_DAYS,
    seatIncrease: settings.SEAT_INCREASE,
    provider: { remote: settings.remote, PARTNER_NAME: settings.PARTNER_NAME },
  };
}

export interface WorkerDeps {
  chains: ChainStore;
  provisioning: ProvisioningClient;
  clock: Clock;
  log: Logger;
  metrics: Metrics;
  queues: Record<QueueName, Queue>;
  settings: WorkerSettings;
}
