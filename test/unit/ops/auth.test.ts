// The ops token guard's reading of the Authorization header.
import { describe, expect, it } from 'vitest';
import { presentedToken, requireOpsToken } from '../../../src/ops/auth.js';

const basic = (userAndPassword: string) =>
  `Basic ${Buffer.from(userAndPassword).toString('base64')}`;

describe('presentedToken', () => {
  it.each([
    ['Bearer tok-123', 'tok-123'],
    ['bearer   tok-123', 'tok-123'],
    ['Bearer tok-123  ', 'tok-123'],
    [basic('ops:tok-123'), 'tok-123'],
    [basic(':tok-123'), 'tok-123'],
    // UTF-8 bytes, which Node reads as Latin-1.
    [`Bearer ${Buffer.from('tok-€', 'utf8').toString('latin1')}`, 'tok-€'],
    [basic(':tok-€'), 'tok-€'],
  ])('reads %j as %j', (header, token) => {
    expect(presentedToken(header)).toBe(token);
  });

  it.each([[undefined], [''], ['Bearer'], ['Bearer   '], ['Token tok-123'], [basic('no-colon')]])(
    'finds no token in %j',
    (header) => {
      expect(presentedToken(header)).toBeNull();
    },
  );
});

describe('requireOpsToken', () => {
  it('refuses to guard with an empty token', () => {
    expect(() => requireOpsToken('')).toThrow(/empty/);
  });
});
