import { describe, expect, it } from 'vitest';
import { pathOf } from '../../src/request-target.js';

describe('pathOf', () => {
  it.each([
    ['/provisioning?api_key=k', '/provisioning'],
    ['/a/b#frag', '/a/b'],
    ['http://user:pw@host:3000/provisioning/x?q=1', '/provisioning/x'],
    ['HTTPS://host', '/'],
    ['http://host?x=1', '/'],
    ['/', '/'],
    ['*', '*'],
  ])('reads %s as %s', (target, path) => {
    expect(pathOf(target)).toBe(path);
  });
});
