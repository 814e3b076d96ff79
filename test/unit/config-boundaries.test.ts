import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

/**
 * Configuration flows one way (src/config.ts): the entry points read the environment and
 * hand it to config.ts, which gathers each part's settings; no part reads the environment
 * itself or imports the aggregator. A fast check of the source text, no root needed.
 */

const SRC = path.resolve(import.meta.dirname, '../../src');
const CONFIG = path.join(SRC, 'config.ts');

/** Files that may read the process's environment, and why. */
const MAY_READ_ENV: Record<string, string> = {
  'cli/main.ts': 'the CLI entry point',
  'cli/serve.ts': "the CLI's orchestrator commands (serve, node), split from cli/main.ts",
  'cli/cluster.ts': "the CLI's cluster commands (gateway, nodes), split from cli/main.ts",
  'bench/main.ts': 'the benchmark entry point',
  'client/index.ts': "the client library's defaults (SBX_URL, SBX_API_KEY): it runs in the user's program, not the orchestrator",
  'util/inherited-env.ts': 'what child processes inherit and PATH: passed on, never a setting',
};

/** Files that may import src/config.ts: the entry points and the package's index. */
const MAY_IMPORT_CONFIG = new Set(['cli/main.ts', 'cli/serve.ts', 'cli/cluster.ts', 'bench/main.ts', 'orchestrator.ts', 'index.ts']);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

/** Every module specifier of static imports, re-exports and dynamic import() calls. */
function importedSpecifiers(text: string): string[] {
  const found: string[] = [];
  for (const match of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm)) found.push(match[1]!);
  return found;
}

function resolvesToConfig(file: string, specifier: string): boolean {
  if (!specifier.startsWith('.')) return false;
  const target = path.resolve(path.dirname(file), specifier).replace(/\.js$/, '.ts');
  return target === CONFIG || target === CONFIG.replace(/\.ts$/, '');
}

/** process.env, process['env'], or env imported from node:process. */
const READS_ENV = [/\bprocess\s*\.\s*env\b/, /\bprocess\s*\[\s*['"]env['"]\s*\]/, /import\s*\{[^}]*\benv\b[^}]*\}\s*from\s*['"](?:node:)?process['"]/];

function readersOfEnv(files: Array<{ name: string; text: string }>): string[] {
  return files.filter(({ name, text }) => !(name in MAY_READ_ENV) && READS_ENV.some((pattern) => pattern.test(text))).map(({ name }) => name);
}

function importersOfConfig(files: Array<{ name: string; file: string; text: string }>): string[] {
  return files
    .filter(({ name, file, text }) => !MAY_IMPORT_CONFIG.has(name) && importedSpecifiers(text).some((s) => resolvesToConfig(file, s)))
    .map(({ name }) => name);
}

const files = sourceFiles(SRC).map((file) => ({ file, name: path.relative(SRC, file), text: readFileSync(file, 'utf8') }));

describe('configuration flows one way', () => {
  it('finds the source files', () => {
    assert.ok(files.length > 100, `only ${files.length} files under ${SRC}`);
    assert.ok(files.some((f) => f.name === 'config.ts'));
  });

  it('only the entry points read process.env', () => {
    const offenders = readersOfEnv(files);
    assert.deepEqual(offenders, [], `process.env is read outside the entry points (pass settings from src/config.ts instead): ${offenders.join(', ')}`);
  });

  it('no part imports src/config.ts; only the entry points do', () => {
    const offenders = importersOfConfig(files);
    assert.deepEqual(offenders, [], `src/config.ts is imported by ${offenders.join(', ')}: import the part's own settings module instead`);
  });

  it('the checks see an offender (each pattern once)', () => {
    const planted = (name: string, text: string) => ({ name, file: path.join(SRC, name), text });
    assert.deepEqual(readersOfEnv([planted('runtimes/x.ts', "const bin = process.env.RUNC_BIN || 'runc';")]), ['runtimes/x.ts']);
    assert.deepEqual(readersOfEnv([planted('runtimes/x.ts', "const { RUNC_BIN } = process['env'];")]), ['runtimes/x.ts']);
    assert.deepEqual(readersOfEnv([planted('api/x.ts', "import { argv, env } from 'node:process';")]), ['api/x.ts']);
    assert.deepEqual(readersOfEnv([planted('api/x.ts', "import { argv } from 'node:process'; const environment = {};")]), []);
    assert.deepEqual(readersOfEnv([planted('cli/main.ts', 'process.env.SBX_URL')]), []);
    assert.deepEqual(importersOfConfig([planted('runtimes/qemu/x.ts', "import type { OrchestratorConfig } from '../../config.js';")]), ['runtimes/qemu/x.ts']);
    assert.deepEqual(importersOfConfig([planted('sessions/x.ts', "const c = await import('../config.js');")]), ['sessions/x.ts']);
    assert.deepEqual(importersOfConfig([planted('api/x.ts', "export { defaultConfig } from '../config.js';")]), ['api/x.ts']);
    // A module of the same name elsewhere is not the aggregator.
    assert.deepEqual(importersOfConfig([planted('runtimes/firecracker/x.ts', "import { writeTemplateRootKey } from './snapshot/base-config.js';")]), []);
    assert.deepEqual(importersOfConfig([planted('orchestrator.ts', "import type { OrchestratorConfig } from './config.js';")]), []);
  });
});
