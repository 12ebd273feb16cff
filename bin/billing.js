#!/usr/bin/env node
// The `billing` command: builds on first use (or after a change), then runs the CLI.
import { ensureBuilt } from '../scripts/ensure-built.mjs';
import { whenOrphaned } from '../scripts/parent-watch.mjs';

ensureBuilt();
const { runCli } = await import('../dist/src/cli.js');
await runCli(process.argv);
// Under `npx billing start &`, `kill $!` reaches npm only, which does not pass it on: its end
// stops the service instead, as under `npm start &`. Only under npx: started by hand (`nohup`,
// a shell that exits) or by a supervisor, the service outlives its parent as any process does.
// Watched once started (as scripts/start.mjs does): its signal listeners would otherwise keep
// a signal that comes while it starts from stopping it.
if (process.env.npm_command === 'exec' && process.argv[2] === 'start') {
  whenOrphaned(() => process.kill(process.pid, 'SIGTERM'));
}
