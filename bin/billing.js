#!/usr/bin/env node
// The `billing` command: builds on first use (or after a change), then runs the CLI.
import { ensureBuilt } from '../scripts/ensure-built.mjs';

ensureBuilt();
const { runCli } = await import('../dist/src/cli.js');
await runCli(process.argv);
