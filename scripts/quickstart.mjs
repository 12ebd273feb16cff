// The README's one command for a new user: install redis-server and dependencies, then start.

import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { STOP_SIGNALS, whenOrphaned } from './parent-watch.mjs';
import { ensureDependencies, ensureRedisServer, projectRoot } from './setup.mjs';

ensureRedisServer();
ensureDependencies();

// Longer than the service's own shutdown needs, short enough that a hung one does not trap the user.
const GROUP_EXIT_WAIT_MS = 30_000;

console.log('> npm start');
// A process group of its own: npm does not pass signals on through its `sh -c`, so the signal
// goes to the whole group (npm, the shell, the service and its redis-server) exactly once.
// Without this, a terminal's Ctrl-C reached each of them and a forwarded one came twice.
const child = spawn('npm', ['start'], { cwd: projectRoot, stdio: 'inherit', detached: true });

let forwarded = false;
function stopGroup(signal) {
  forwarded = true;
  signalGroup(signal);
}
// SIGHUP too: a closed terminal reaches this process's group, not the service's.
for (const signal of STOP_SIGNALS) process.on(signal, () => stopGroup(signal));
// Under `npm run quickstart &`, `kill $!` reaches npm's shell only: its end stops the service.
whenOrphaned(() => stopGroup('SIGTERM'));

child.on('error', (error) => {
  console.error(`could not run npm start: ${error.message}`);
  process.exit(1);
});

child.on('exit', async (code, signal) => {
  // npm dies at once on a signal while the service is still draining; returning the prompt
  // before the service is gone would hide its last lines and leave it running unseen.
  if (forwarded) await groupGone(GROUP_EXIT_WAIT_MS);
  // Shells report death by signal N as 128 + N.
  process.exit(code ?? 128 + (signal === null ? 1 : constants.signals[signal]));
});

function signalGroup(signal) {
  try {
    process.kill(-child.pid, signal);
    return true;
  } catch {
    return false;
  }
}

async function groupGone(timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  // Signal 0 only asks whether any member of the group is still alive.
  while (signalGroup(0) && Date.now() < deadline) await delay(100);
}
