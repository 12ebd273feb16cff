// Installs what must exist before the service runs: redis-server and node_modules. No dependencies,
// because it runs before the dependencies are installed.

import { spawnSync } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const projectRoot = fileURLToPath(new URL('..', import.meta.url));

/** The absolute path of an executable `name` on PATH, or null. */
export function findOnPath(name) {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir === '') continue;
    const candidate = path.resolve(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // Not here; keep looking.
    }
  }
  return null;
}

/** Runs a command with inherited stdio from the project root and returns its exit status. */
export function run(command, args, { quiet = false, ...options } = {}) {
  if (!quiet) console.log(`> ${[command, ...args].join(' ')}`);
  const result = spawnSync(command, args, { cwd: projectRoot, stdio: 'inherit', ...options });
  if (result.error) {
    console.error(`could not run ${command}: ${result.error.message}`);
    return 1;
  }
  // A signal-killed child has status null; report it as a failure, as a shell would.
  return result.status ?? 1;
}

/** Runs a command and exits with its status when it fails. */
export function runOrExit(command, args, options = {}) {
  const status = run(command, args, options);
  if (status !== 0) process.exit(status);
}

function fail(message) {
  console.error(message);
  process.exit(1);
}

const INSTALL_HELP =
  'Install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` ' +
  '(macOS), or run `docker compose up -d redis` and set REDIS_URL=redis://127.0.0.1:6379, ' +
  'or set REDIS_URL to an existing Redis.';

/** Installs redis-server with apt-get (Linux) or Homebrew (macOS) when it is not on PATH. */
export function ensureRedisServer() {
  if (findOnPath('redis-server') !== null) return;
  if (process.platform === 'linux' && findOnPath('apt-get') !== null) {
    installWithApt();
  } else if (process.platform === 'darwin' && findOnPath('brew') !== null) {
    console.log(
      'Installing Redis with Homebrew (brew install redis): without REDIS_URL the service ' +
        'runs a private redis-server, and none is on PATH.',
    );
    runOrExit('brew', ['install', 'redis']);
  } else {
    fail(`redis-server is not on PATH and this script cannot install it here. ${INSTALL_HELP}`);
  }
  if (findOnPath('redis-server') === null) {
    fail(`redis-server is still not on PATH after installing it. ${INSTALL_HELP}`);
  }
}

function installWithApt() {
  const isRoot = process.getuid?.() === 0;
  if (!isRoot && findOnPath('sudo') === null) {
    fail(`redis-server is not on PATH, and installing it needs root or sudo. ${INSTALL_HELP}`);
  }
  console.log(
    'Installing the redis-server package with apt-get: without REDIS_URL the service runs a ' +
      'private redis-server, and none is on PATH. Only the binary is used; the service the ' +
      'package may also start is not.',
  );
  // sudo drops the environment, so the variable goes on its command line.
  const prefix = isRoot
    ? ['env', 'DEBIAN_FRONTEND=noninteractive']
    : ['sudo', 'DEBIAN_FRONTEND=noninteractive'];
  const [command, ...rest] = prefix;
  runOrExit(command, [...rest, 'apt-get', 'update']);
  const status = run(command, [...rest, 'apt-get', 'install', '-y', 'redis-server']);
  // The package's post-install starts a system service; where that is blocked (containers
  // without systemd, port 6379 taken) apt-get fails, yet the binary we need is installed.
  if (status !== 0 && findOnPath('redis-server') !== null) {
    console.log('apt-get reported a failure, but redis-server is installed; continuing.');
  } else if (status !== 0) {
    process.exit(status);
  }
}

/**
 * Runs `npm install` (from the lockfile) when node_modules is missing or older than
 * package-lock.json. Not `npm ci`: the lockfile lists the native packages of Linux only (the
 * registry it was made from serves no others), and `npm ci` refuses a lockfile that lacks another
 * platform's optional packages, where `npm install` fetches the right ones for this machine.
 */
export function ensureDependencies() {
  const lock = mtimeMs(path.join(projectRoot, 'package-lock.json'));
  // npm writes this hidden lockfile at the end of every install, so its age is the install's.
  const installed = mtimeMs(path.join(projectRoot, 'node_modules', '.package-lock.json'));
  if (installed !== null && lock !== null && installed >= lock) return;
  console.log(
    installed === null
      ? 'Installing dependencies (npm install): node_modules is missing.'
      : 'Installing dependencies (npm install): package-lock.json changed since the last install.',
  );
  runOrExit('npm', ['install', '--no-audit', '--no-fund']);
}

function mtimeMs(file) {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return null;
  }
}
