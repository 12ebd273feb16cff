// The `npm test` entry: installs what is missing, then runs lint, typecheck and vitest in order.

import { ensureDependencies, ensureRedisServer, runOrExit } from './setup.mjs';

ensureRedisServer();
ensureDependencies();
runOrExit('npm', ['run', 'lint']);
runOrExit('npm', ['run', 'typecheck']);
// Extra arguments (`npm test -- test/unit`) narrow the vitest run.
runOrExit('npx', ['vitest', 'run', ...process.argv.slice(2)]);
