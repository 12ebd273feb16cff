// The intake's signature over bytes against standardwebhooks' own, which signs text.
import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { signWebhook, webhookKey, webhookSignature } from '../../../src/intake/sign.js';

const SECRET = `whsec_${Buffer.from('a signing key of the tests').toString('base64')}`;

describe('webhookSignature', () => {
  it('is the package signature for any text body, taken as its UTF-8 bytes', () => {
    const reference = new Webhook(SECRET);
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme' }),
        fc.integer({ min: 0, max: 4_102_444_800 }),
        fc.string({ maxLength: 200, unit: 'grapheme' }),
        (id, timestamp, body) => {
          const expected = reference.sign(id, new Date(timestamp * 1000), body);
          expect(webhookSignature(webhookKey(SECRET), id, timestamp, body)).toBe(expected);
          expect(
            webhookSignature(webhookKey(SECRET), id, timestamp, Buffer.from(body, 'utf8')),
          ).toBe(expected);
        },
      ),
    );
  });

  it('signs bytes that are not UTF-8 as they are, where decoding them would lose them', () => {
    const key = webhookKey(SECRET);
    const latin1 = Buffer.from([0x4d, 0xfc, 0x6c, 0x6c, 0x65, 0x72]);
    const replaced = Buffer.from(latin1.toString('utf8'), 'utf8');
    expect(webhookSignature(key, 'evt-1', 1_700_000_000, latin1)).not.toBe(
      webhookSignature(key, 'evt-1', 1_700_000_000, replaced),
    );
  });

  it('takes the secret with or without its whsec_ prefix, and refuses one that is not base64', () => {
    expect(webhookKey(SECRET).equals(webhookKey(SECRET.slice('whsec_'.length)))).toBe(true);
    expect(() => webhookKey('whsec_not base64!')).toThrow();
    expect(() => webhookKey('whsec_')).toThrow();
  });

  it('gives the three headers of a delivery', () => {
    expect(signWebhook(SECRET, 'evt-2', 1_700_000_000, '{}')).toEqual({
      'webhook-id': 'evt-2',
      'webhook-timestamp': '1700000000',
      'webhook-signature': new Webhook(SECRET).sign('evt-2', new Date(1_700_000_000_000), '{}'),
    });
  });
});
