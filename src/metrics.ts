// Prometheus metrics: jobs by queue and outcome, orders the workers made, API traffic.
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    jobs: new Counter({
      name: 'billing_jobs_total',
      help: 'Jobs finished, by queue and outcome (completed, failed, retried)',
      labelNames: ['queue', 'outcome'] as const,
      registers: [registry],
    }),
    renewals: new Counter({
      name: 'billing_renewals_total',
      help: 'Renewal orders made, by variant',
      labelNames: ['variant'] as const,
      registers: [registry],
    }),
    orders: new Counter({
      name: 'billing_orders_total',
      help: 'Orders the workers made, by kind (first, renewal, partial, addon)',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    suspensions: new Counter({
      name: 'billing_suspensions_total',
      help: 'Chains suspended or unsuspended, by action',
      labelNames: ['action'] as const,
      registers: [registry],
    }),
    requests: new Counter({
      name: 'billing_http_requests_total',
      help: 'HTTP requests, by route and status',
      labelNames: ['route', 'method', 'status'] as const,
      registers: [registry],
    }),
    latency: new Histogram({
      name: 'billing_http_request_duration_seconds',
      help: 'HTTP request latency, by route',
      labelNames: ['route'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    provisioningCalls: new Counter({
      name: 'billing_provisioning_calls_total',
      help: 'Provisioning interface calls, by method and outcome (ok, refused, unauthorized, misconfigured, failed)',
      labelNames: ['method', 'status'] as const,
      registers: [registry],
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
