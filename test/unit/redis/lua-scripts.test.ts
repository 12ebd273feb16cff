// Reading Lua scripts: key counts from file names, and `--- @include` inlined from other files.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readScripts } from '../../../src/redis/lua-scripts.js';

/** A folder of scripts written from `files` (path -> text); its URL ends with a slash. */
function folderWith(files: Record<string, string>): URL {
  const root = mkdtempSync(path.join(tmpdir(), 'lua-scripts-'));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
    writeFileSync(path.join(root, name), text);
  }
  return pathToFileURL(`${root}/scripts/`);
}

describe('readScripts', () => {
  it('names each script and its key count from the file name, skipping other files', () => {
    const folder = folderWith({ 'scripts/doThing-3.lua': 'return 1', 'scripts/notes.txt': 'x' });
    expect(readScripts(folder)).toEqual([{ name: 'doThing', numberOfKeys: 3, lua: 'return 1' }]);
  });

  it('inlines includes relative to the including file, nested ones too', () => {
    const folder = folderWith({
      'scripts/main-1.lua': '--- @include "includes/a.lua"\nreturn a()',
      'scripts/includes/a.lua':
        '--- @include "../../shared/b.lua"\nlocal function a() return b() end',
      'shared/b.lua': 'local function b() return 2 end',
    });
    expect(readScripts(folder)[0]?.lua).toBe(
      'local function b() return 2 end\nlocal function a() return b() end\nreturn a()',
    );
  });

  it('refuses an include cycle', () => {
    const folder = folderWith({
      'scripts/main-1.lua': '--- @include "a.lua"',
      'scripts/a.lua': '--- @include "main-1.lua"',
    });
    expect(() => readScripts(folder)).toThrow(/Lua include cycle/);
  });
});
