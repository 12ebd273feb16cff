// `npm start`: build when needed, then run `billing start` (the embedded default).
import { ensureBuilt } from './ensure-built.mjs';

ensureBuilt();
const { runCli } = await import('../dist/src/cli.js');
await runCli([process.argv[0], 'billing', 'start', ...process.argv.slice(2)]);
