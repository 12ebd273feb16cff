// The renewal window: whether a term may be renewed yet, when the new term starts, and the refusal.
import { remainingDays, SECONDS_PER_DAY } from './periods.js';

export type RenewalWindowCheck =
  | { kind: 'open' }
  | { kind: 'refused'; remainingDays: number; windowDays: number };

/**
 * Whether a renewal is allowed at `now` for a term ending at `expiresAt` (epoch seconds).
 * Refused while more than `windowDays` whole days (windowDays * 86400 s) remain; exactly
 * `windowDays` remaining is open, and so is an expired term. `remainingDays` is rounded up.
 */
export function checkRenewalWindow(
  input: Readonly<{ now: number; expiresAt: number; windowDays: number }>,
): RenewalWindowCheck {
  const { now, expiresAt, windowDays } = input;
  if (expiresAt - now > windowDays * SECONDS_PER_DAY) {
    return { kind: 'refused', remainingDays: remainingDays(now, expiresAt), windowDays };
  }
  return { kind: 'open' };
}

/**
 * When the renewed term starts (epoch seconds). Terms are half-open, so a term with
 * `expiresAt <= now` has expired: the new term starts `now` (and becomes the chain's new anchor,
 * DESIGN §3). Otherwise it starts at `expiresAt`, right after the current term.
 */
export function renewalStart(input: Readonly<{ now: number; expiresAt: number }>): {
  startsAt: number;
  expired: boolean;
} {
  const { now, expiresAt } = input;
  if (expiresAt <= now) {
    return { startsAt: now, expired: true };
  }
  return { startsAt: expiresAt, expired: false };
}

function days(n: number): string {
  return n === 1 ? '1 day' : `${n} days`;
}

/**
 * The refusal message the provisioning interface returns (DESIGN §3), e.g.
 * `renewal refused: 23 days remain in the current term (window: 15 days)`.
 */
export function formatRenewalRefusal(
  r: Readonly<{ remainingDays: number; windowDays: number }>,
): string {
  const verb = r.remainingDays === 1 ? 'remains' : 'remain';
  return (
    `renewal refused: ${days(r.remainingDays)} ${verb} in the current term ` +
    `(window: ${days(r.windowDays)})`
  );
}

/**
 * Whether a refusal is the renewal window's (formatRenewalRefusal): worth trying again later,
 * unlike other refusals that start the same way (a start before the end of the current term
 * means the provider holds a later term than the chain does, which a person must look at).
 */
export function isRenewalWindowRefusal(message: string): boolean {
  return /^renewal refused: \d+ days? remains? in the current term\b/.test(message);
}
