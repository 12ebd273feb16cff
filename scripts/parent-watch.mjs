// npm passes SIGTERM on to the `sh -c` it runs a script under, not further, and the shell dies
// without passing it on: `npm start &` then `kill $!` left the script running, orphaned.

/** How often to look whether the parent is still there (ms). */
const PARENT_CHECK_MS = 500;
/** A terminal's Ctrl-C reaches this process and its parents at once: time for it to land (ms). */
const SIGNAL_SETTLE_MS = 250;

/** The signals that stop the service: Ctrl-C, `kill`, and a terminal that closes. */
export const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * The parent this process started under, read as the launcher's imports are evaluated, before
 * its start (which can take a while): a parent gone meanwhile is noticed too, where one read
 * only when the watch begins would already be init.
 */
const startingParent = process.ppid;

/**
 * Calls `stop` once when this process's parent is gone and none of STOP_SIGNALS reached this
 * process itself (one that did, as a terminal's Ctrl-C, or its closing, reaches every process
 * of the group, is already stopping it: a second stop would cut its shutdown short). Only
 * listens to signals: the caller's own handlers decide what they do.
 */
export function whenOrphaned(stop) {
  const parent = startingParent;
  let signalled = false;
  for (const signal of STOP_SIGNALS) {
    process.on(signal, () => {
      signalled = true;
    });
  }
  const check = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(check);
    setTimeout(() => {
      if (!signalled) stop();
    }, SIGNAL_SETTLE_MS).unref();
  }, PARENT_CHECK_MS);
  check.unref();
}
