import { describe, expect, it } from 'vitest';
import { operatorName } from '../../../src/cli.js';

describe("the CLI's operator name in a chain's history", () => {
  it('is the first name the ops API would take as x-operator, else the user id', () => {
    expect(operatorName(['alice', 'bob'], 1000)).toBe('alice');
    expect(operatorName([undefined, 'bob'], 1000)).toBe('bob');
    expect(operatorName([undefined, 'evil\x1b[2J', 'carol'], 1000)).toBe('carol');
    expect(operatorName([undefined, 'a\u202Eb', ''], 1000)).toBe('uid:1000');
    expect(operatorName([undefined, 'x'.repeat(101)], 1000)).toBe('uid:1000');
    expect(operatorName(['\u{1F600}'.repeat(100)], 0)).toBe('\u{1F600}'.repeat(100));
    expect(operatorName([], undefined)).toBe('uid:unknown');
  });
});
