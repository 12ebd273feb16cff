// The `npm test` entry: installs what is missing, then runs lint, typecheck and vitest in order.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ensureBuilt } from './ensure-built.mjs';
import { ensureDependencies, ensureRedisServer, run, runOrExit } from './setup.mjs';

ensureRedisServer();
ensureDependencies();
runOrExit('npm', ['run', 'lint']);
runOrExit('npm', ['run', 'typecheck']);
// Built once here: several suites run the `billing` command, which would otherwise build dist/
// from inside whichever test runs first, possibly two at once.
ensureBuilt();

// Extra arguments (`npm test -- test/unit`) narrow the vitest run. A JSON report beside the
// usual output gives the plain closing line "N passed, N failed" that CI tools read.
const reportDir = mkdtempSync(path.join(tmpdir(), 'vitest-report-'));
const report = path.join(reportDir, 'report.json');
const status = run('npx', [
  'vitest',
  'run',
  '--reporter=default',
  '--reporter=json',
  `--outputFile.json=${report}`,
  ...process.argv.slice(2),
]);
try {
  const { numPassedTests, numFailedTests, numPendingTests } = JSON.parse(
    readFileSync(report, 'utf8'),
  );
  console.log(
    `\nvitest: ${numPassedTests} passed, ${numFailedTests} failed, ${numPendingTests} skipped`,
  );
} catch {
  console.log('\nvitest: no report was written');
}
rmSync(reportDir, { recursive: true, force: true });
process.exit(status);
