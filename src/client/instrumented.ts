// Counts every provisioning call by method and outcome, around any ProvisioningClient.
import { ConfigError, RefusalError } from '../errors.js';
import type { Metrics } from '../metrics.js';
import type { ProvisioningClient } from './provisioning-client.js';

type Method = Exclude<
  keyof ProvisioningClient,
  'variant' | 'extensions' | 'close' | 'createRecorded'
>;
const methods: readonly Method[] = [
  'createCustomer',
  'createOrder',
  'createFirstOrder',
  'createRenewalOrder',
  'cancelOrder',
  'suspendOrder',
  'unsuspendOrder',
];

function outcomeOf(error: unknown): string {
  if (error instanceof RefusalError) return 'refused';
  if (error instanceof ConfigError) {
    return error.code === 'provisioning_unauthorized' ? 'unauthorized' : 'misconfigured';
  }
  return 'failed';
}

export function instrumentClient(client: ProvisioningClient, metrics: Metrics): ProvisioningClient {
  const counted = async <T>(method: string, call: () => Promise<T>): Promise<T> => {
    try {
      const result = await call();
      metrics.provisioningCalls.inc({ method, status: 'ok' });
      return result;
    } catch (error) {
      metrics.provisioningCalls.inc({ method, status: outcomeOf(error) });
      throw error;
    }
  };
  const wrapped = Object.fromEntries(
    methods.map((method) => [
      method,
      (params: never) =>
        counted(method, () => (client[method] as (p: never) => Promise<unknown>)(params)),
    ]),
  );
  const { createRecorded } = client;
  return {
    ...(wrapped as unknown as ProvisioningClient),
    ...(createRecorded
      ? {
          createRecorded: (method, params, companion) =>
            counted(method, () => createRecorded.call(client, method, params, companion)),
        }
      : {}),
    variant: client.variant,
    extensions: client.extensions,
    close: () => client.close(),
  };
}
