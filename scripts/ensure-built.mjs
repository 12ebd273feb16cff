// Builds dist/ when the sources changed since the last build, and copies the Lua scripts beside it.

import { copyFileSync, mkdirSync, readdirSync, rmSync, statSync, utimesSync } from 'node:fs';
import path from 'node:path';
import { projectRoot, runOrExit } from './setup.mjs';

const ENTRY = path.join(projectRoot, 'dist', 'src', 'main.js');
const SOURCE_DIRS = ['src', 'config', 'jobs'];
const LUA_DIRS = ['src', 'jobs'];
// A changed compiler setting changes the output as much as a changed source does.
const BUILD_CONFIGS = ['tsconfig.json', 'tsconfig.build.json'];

/** Runs `npm run build` when dist/src/main.js is missing or older than a source, then syncs Lua. */
export function ensureBuilt() {
  const builtAt = mtimeMs(ENTRY);
  const changed = builtAt === null ? null : firstNewerSource(builtAt);
  if (builtAt === null || changed !== null) {
    // stderr, so `billing ... --json` keeps stdout for its JSON line even on a first run.
    console.error(
      builtAt === null
        ? 'Building (npm run build): dist/src/main.js is missing.'
        : `Building (npm run build): ${path.relative(projectRoot, changed)} changed.`,
    );
    runOrExit('npm', ['run', '--silent', 'build'], {
      stdio: ['ignore', process.stderr, 'inherit'],
      quiet: true,
    });
    // tsc may leave an unchanged output untouched; stamping the entry keeps the next check cheap.
    const now = new Date();
    utimesSync(ENTRY, now, now);
  }
  copyLuaScripts();
}

function firstNewerSource(builtAt) {
  const candidates = [
    ...BUILD_CONFIGS.map((name) => path.join(projectRoot, name)),
    ...SOURCE_DIRS.flatMap((dir) => listFiles(dir, /\.(ts|lua)$/)),
  ];
  return candidates.find((file) => (mtimeMs(file) ?? 0) > builtAt) ?? null;
}

/**
 * Mirrors the Lua scripts into dist/: copies new and changed ones and removes those whose source
 * is gone, since scripts are loaded by folder and a stale one would shadow its renamed successor.
 */
export function copyLuaScripts() {
  const sources = LUA_DIRS.flatMap((dir) => listFiles(dir, /\.lua$/));
  const wanted = new Set(sources.map((source) => path.relative(projectRoot, source)));
  for (const built of LUA_DIRS.flatMap((dir) => listFiles(path.join('dist', dir), /\.lua$/))) {
    if (!wanted.has(path.relative(path.join(projectRoot, 'dist'), built))) rmSync(built);
  }
  for (const source of sources) {
    const target = path.join(projectRoot, 'dist', path.relative(projectRoot, source));
    const sourceStat = statSync(source);
    const targetTime = mtimeMs(target);
    if (targetTime !== null && targetTime >= sourceStat.mtimeMs) continue;
    mkdirSync(path.dirname(target), { recursive: true });
    copyFileSync(source, target);
  }
}

function listFiles(dir, pattern) {
  const root = path.join(projectRoot, dir);
  let entries;
  try {
    entries = readdirSync(root, { recursive: true, withFileTypes: true });
  } catch {
    // A directory that does not exist yet holds no sources.
    return [];
  }
  return entries
    .filter((entry) => entry.isFile() && pattern.test(entry.name))
    .map((entry) => path.join(entry.parentPath, entry.name));
}

function mtimeMs(file) {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return null;
  }
}
