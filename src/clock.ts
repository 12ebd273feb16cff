// The one source of "now" for the core and the workers: nothing else reads the system time.

/** Epoch seconds, the unit of the provisioning interface. */
export type EpochSeconds = number;

export interface Clock {
  /**
   * The current instant in whole epoch seconds. `scope` names the partner asking, so that a
   * later per-partner test clock can answer differently; the system clock ignores it.
   */
  now(scope?: string): EpochSeconds;
}

export const systemClock: Clock = {
  now: () => Math.floor(Date.now() / 1000),
};

/**
 * `clock` as one partner asks it: whatever acts for that partner (the workers, the ops API on
 * its chains) sees the same "now" as the core answering that partner's calls.
 */
export function partnerClock(clock: Clock, scope: string): Clock {
  return { now: () => clock.now(scope) };
}

/** A clock that only moves when told to: for tests and, later, operator-driven test clocks. */
export interface ManualClock extends Clock {
  set(at: EpochSeconds): void;
  advance(seconds: number): void;
}

export function manualClock(start: EpochSeconds): ManualClock {
  let current = start;
  return {
    now: () => current,
    set: (at) => {
      current = at;
    },
    advance: (seconds) => {
      current += seconds;
    },
  };
}

/**
 * Milliseconds since the epoch by the system clock, for BullMQ only: its delayed-job timestamps
 * come from each client's clock, so `moveToDelayed` needs this time base, not a test clock's.
 */
export function queueTimeMs(): number {
  return Date.now();
}

/**
 * How long BullMQ waits until `at` by `clock` (ms; none once it has passed). The clock is read
 * here, at the queue call, rather than taken as a `now` from the caller: a `now` read before
 * provider calls or a wait for another job is seconds old by then, and a delay counted from it
 * fires that much late.
 */
export function delayUntil(clock: Clock, at: EpochSeconds): number {
  return Math.max(0, at - clock.now()) * 1000;
}
