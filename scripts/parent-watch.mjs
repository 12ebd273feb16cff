// npm passes SIGTERM on to the `sh -c` it runs a script under, not further, and the shell dies
// without passing it on: `npm start &` then `kill $!` left the script running, orphaned.

/** How often to look whether the parent is still there (ms). */
const PARENT_CHECK_MS = 500;
/** A terminal's Ctrl-C reaches this process and its parents at once: time for it to land (ms). */
const SIGNAL_SETTLE_MS = 250;

/**
 * Calls `stop` once when this process's parent is gone and no SIGINT, SIGTERM or SIGHUP reached
 * this process itself (one that did, as a terminal's Ctrl-C, or its closing, reaches every
 * process of the group, is already stopping it: a second stop would cut its shutdown short). Only listens to signals:
 * the caller's own handlers decide what they do. `parent` is the parent this process started
 * under, read first thing: a parent gone while this process was still starting (its start can
 * take a while) is noticed too, where one read only now would already be init.
 */
export function whenOrphaned(stop, parent = process.ppid) {
  let signalled = false;
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
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
