// The rename from the untagged key layout: every key the older version wrote maps to the name
// today's key builders give it, all under the one hash tag.
import { describe, expect, it } from 'vitest';
import { chainKeys, customerChainsKey, indexKeys } from '../../../src/chains/keys.js';
import { webhookDedupKey } from '../../../src/intake/webhooks.js';
import { partnerKeys, registryKeys } from '../../../src/provisioning/keys.js';
import { QUEUE_PREFIX } from '../../../src/queues.js';
import { taggedKeyName } from '../../../src/redis/key-layout.js';
import { KEY_TAG } from '../../../src/redis/key-space.js';

describe('taggedKeyName', () => {
  it("maps the older version's key names to today's", () => {
    const chain = chainKeys('cABC');
    const core = partnerKeys(7);
    const hash = webhookDedupKey('evt-1').split(':').at(-1);
    const pairs: [string, string][] = [
      ['bc:chain:cABC', chain.chain],
      ['bc:chain:cABC:intent', chain.intent],
      ['bc:chain:cABC:history', chain.history],
      ['bc:chain:cABC:lock', chain.lock],
      ['bc:index:orders', indexKeys.orders],
      ['bc:index:due', indexKeys.due],
      ['bc:index:chains', indexKeys.all],
      ['bc:index:known-customers', indexKeys.knownCustomers],
      [
        `bc:index:customer:${customerChainsKey('cust-1').split(':').at(-1)}`,
        customerChainsKey('cust-1'),
      ],
      [`bc:webhook:${hash}`, webhookDedupKey('evt-1')],
      ['bc:renewals:delayed', `${QUEUE_PREFIX}:renewals:delayed`],
      ['bc:renewals:renew-cABC-2', `${QUEUE_PREFIX}:renewals:renew-cABC-2`],
      ['pp:{p7}:orders', core.orders],
      ['pp:{p7}:customers', core.customers],
      ['pp:{p7}:chains', core.chains],
      ['pp:{p7}:users:active', core.usersActive],
      ['pp:{p7}:seq', core.sequences],
      ['pp:{p12}:instances', partnerKeys(12).instances],
      ['pp:partners', registryKeys.partners],
      ['pp:partner-names', registryKeys.partnerNames],
      ['pp:partner-keys', registryKeys.partnerKeys],
      ['pp:seq', registryKeys.sequences],
      ['pp:outbox', registryKeys.outbox],
    ];
    for (const [old, today] of pairs) {
      expect(taggedKeyName(old), old).toBe(today);
      expect(today.startsWith(`${KEY_TAG}:`), today).toBe(true);
    }
  });

  it('leaves keys that are not ours alone', () => {
    for (const key of [
      'bull:renewals:wait',
      'sess:1',
      '{bc}:chain:c1',
      'bcx:1',
      'ppp:1',
      '',
      // Another application's keys under the same roots.
      'bc:cache:1',
      'bc:renewalsx:1',
      'pp:cache:1',
      'pp:{p1}:other',
      'pp:{p1}:orders:x',
      'pp:{px}:orders',
    ]) {
      expect(taggedKeyName(key), key).toBeNull();
    }
  });
});
