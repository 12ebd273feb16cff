// `npm start`: build when needed, then run `billing start` (the embedded default).
import { ensureBuilt } from './ensure-built.mjs';
import { whenOrphaned } from './parent-watch.mjs';

ensureBuilt();
const { runCli } = await import('../dist/src/cli.js');
await runCli([process.argv[0], 'billing', 'start', ...process.argv.slice(2)]);
// Under `npm start &`, `kill $!` reaches npm's shell only: its end stops the service instead.
whenOrphaned(() => process.kill(process.pid, 'SIGTERM'));
