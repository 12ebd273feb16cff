// Waiting for a server process to reach a state, without fixed sleeps.
import { vi } from 'vitest';

/** Waits for `check` to hold (it may throw while things start), or fails naming `what`. */
export function until(check: () => Promise<boolean>, what: string): Promise<void> {
  return vi.waitFor(
    async () => {
      if (!(await check())) throw new Error(`timed out waiting for ${what}`);
    },
    { timeout: 20_000, interval: 100 },
  );
}
