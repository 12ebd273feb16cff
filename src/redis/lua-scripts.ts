// Loads a folder of Lua scripts and registers each as an ioredis command.
//
// A file is named `<command>-<numberOfKeys>.lua` (BullMQ's convention), so its key count is read
// from the name and a script cannot be called with the wrong split between KEYS and ARGV. A line
// `--- @include "<path>"` is replaced by that file (relative to the script), as in BullMQ, so two
// scripts can share the checks and writes that one atomic step needs.
import { readdirSync, readFileSync } from 'node:fs';
import type { RedisClient } from './connection.js';

export type ScriptArg = string | number;

/** The keys and args of one script call, for a caller that composes it into another script. */
export interface ScriptCall {
  readonly keys: readonly string[];
  readonly args: readonly ScriptArg[];
}

export interface LuaScript {
  readonly name: string;
  readonly numberOfKeys: number;
  readonly lua: string;
}

const FILE_NAME = /^([A-Za-z][A-Za-z0-9]*)-(\d+)\.lua$/;
const INCLUDE = /^--- @include "([^"]+)"$/gm;

/** The script at `file` with its includes inlined (each include may include others). */
function readWithIncludes(file: URL, seen: readonly string[] = []): string {
  if (seen.includes(file.href)) {
    throw new Error(`Lua include cycle: ${[...seen, file.href].join(' -> ')}`);
  }
  return readFileSync(file, 'utf8').replace(INCLUDE, (_line, target: string) =>
    readWithIncludes(new URL(target, file), [...seen, file.href]),
  );
}

/** Reads every `<name>-<keys>.lua` in `folder` once; call at start, not per request. */
export function readScripts(folder: URL): readonly LuaScript[] {
  return readdirSync(folder)
    .map((file) => ({ file, match: FILE_NAME.exec(file) }))
    .filter((entry): entry is { file: string; match: RegExpExecArray } => entry.match !== null)
    .map(({ file, match }) => ({
      name: match[1] as string,
      numberOfKeys: Number(match[2]),
      lua: readWithIncludes(new URL(file, folder)),
    }));
}

/** Registers the scripts on a connection (idempotent per connection; EVALSHA after the first call). */
export function defineScripts(redis: RedisClient, scripts: readonly LuaScript[]): void {
  for (const script of scripts) {
    if (typeof (redis as unknown as Record<string, unknown>)[script.name] === 'function') continue;
    redis.defineCommand(script.name, { numberOfKeys: script.numberOfKeys, lua: script.lua });
  }
}

/**
 * Calls a registered script. The typed wrappers in each store are the only callers, so the
 * `unknown` reply is parsed right there.
 */
export function callScript(
  redis: RedisClient,
  name: string,
  keys: readonly string[],
  args: readonly ScriptArg[],
): Promise<unknown> {
  const command = (redis as unknown as Record<string, (...a: ScriptArg[]) => Promise<unknown>>)[
    name
  ];
  if (command === undefined)
    throw new Error(`Lua script ${name} is not defined on this connection`);
  return command.call(redis, ...keys, ...args);
}
