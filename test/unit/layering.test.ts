/**
 * The layering of src/ (issue 12), checked on every run of scripts/test.sh (unit tier).
 *
 * A folder imports only from its own layer and the layers below it:
 *
 *   entry points   cli/, bench/, orchestrator.ts, index.ts  (wire everything together)
 *   cluster/       placement across nodes (issue 22), later the gateway and node modes
 *   api/ mcp/      the HTTP server and its routes; the MCP server (tools over the client SDK)
 *   sessions/      the session registry, lifecycle, clocks, warm pool
 *   runtimes/ computer/ tools/ files/ templates/ recording/ vendors/   what a session is made of
 *   transport/ network/ guest/ host/         SSH, addresses and nftables, the guest contract, host facts
 *   util/          nothing about sandboxes at all
 *
 * Shared leaves any layer may import: errors.ts and its registry error-codes.ts, logger.ts,
 * metrics/, config.ts (the settings module: it reads each part's settings types, and is read
 * by the parts' settings). The
 * client SDK (client/) is published on its own and imports nothing of the server.
 *
 * (dependency-cruiser was the first choice; it cannot read this project's TypeScript 7, whose
 * compiler has no JavaScript API, so the imports are read here: every `import`/`export ...
 * from` and `import()` of a relative path. Type-only imports count too: a type from a layer
 * above is as much a dependency on it.)
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SRC = path.join(ROOT, 'src');

/** Higher numbers are higher layers; undefined: a shared leaf (see above). */
const LAYER_OF_TOP: Record<string, number | undefined> = {
  cli: 6,
  bench: 6,
  'orchestrator.ts': 6,
  'index.ts': 6,
  'orchestrator-lock.ts': 6,
  // A cluster of nodes behind gateways (issue 22): the gateway fronts the routes and a node
  // wraps today's orchestrator, so it sits over api/ and sessions/, under the entry points.
  cluster: 5.5,
  api: 5,
  mcp: 5,
  // E2B's API (issue 26): routes beside ours, on the sessions, processes and files; served by api/.
  e2b: 5,
  // Live views sit on the sessions (their connection, takeover) and under the routes.
  views: 4.5,
  // Guest ports on URLs and the desktop's browser over CDP (issue 24): on the sessions' connections, under the routes.
  ports: 4.5,
  sessions: 4,
  // The built-in agent loop: drives sessions through their tools; the API serves it.
  runs: 4,
  runtimes: 3,
  computer: 3,
  tools: 3,
  processes: 3,
  files: 3,
  templates: 3,
  recording: 3,
  vendors: 3,
  // Volumes (issue 25): named disks of a tenant, held by sessions; the sessions take them, the routes serve them.
  volumes: 3,
  // Snapshots and forks (issue 25): a tenant's saved desktops; the sessions take and fork them, the routes serve them.
  snapshots: 3,
  transport: 2,
  network: 2,
  guest: 2,
  host: 2,
  util: 1,
};
const SHARED_LEAVES = new Set(['errors.ts', 'error-codes.ts', 'logger.ts', 'metrics', 'config.ts']);
/** Generated files, not held to the size limit. */
const GENERATED = new Set(['runtimes/firecracker/api/spec-types.ts', 'computer/keysym-names.ts', 'client/api-types.ts']);
/** Folders of generated files (envd's protos as TypeScript, scripts/envd-codegen). */
const GENERATED_DIRS = ['e2b/gen/'];
const MAX_LINES = 400;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

/** Relative import specifiers of a module (static, re-exports, dynamic). */
export function relativeImports(source: string): string[] {
  const found: string[] = [];
  const patterns = [/\b(?:import|export)\s[^'"`;]*?\bfrom\s*['"](\.[^'"]+)['"]/g, /\bimport\s*['"](\.[^'"]+)['"]/g, /\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g];
  for (const pattern of patterns) for (const match of source.matchAll(pattern)) found.push(match[1] as string);
  return found;
}

/** The first path segment under src/ ('sessions', 'config.ts', ...). */
function topOf(file: string): string {
  return path.relative(SRC, file).split(path.sep)[0] as string;
}

/** Every import of `file` that reaches a layer above its own. */
function violations(file: string): string[] {
  const from = topOf(file);
  const fromLayer = LAYER_OF_TOP[from];
  const out: string[] = [];
  for (const spec of relativeImports(readFileSync(file, 'utf8'))) {
    // Sources import each other by their compiled name (./x.js for ./x.ts).
    const target = path.resolve(path.dirname(file), spec).replace(/\.js$/, '.ts');
    if (!target.startsWith(SRC + path.sep)) continue;
    const to = topOf(target);
    if (from === 'client' && to !== 'client') out.push(`${path.relative(ROOT, file)} -> ${spec} (the client SDK imports nothing of the server)`);
    if (fromLayer === undefined || to === from || SHARED_LEAVES.has(to)) continue;
    const toLayer = LAYER_OF_TOP[to];
    if (toLayer === undefined) {
      if (to !== 'client') out.push(`${path.relative(ROOT, file)} -> ${spec} (${to} has no layer: add it to LAYER_OF_TOP)`);
      continue;
    }
    if (toLayer > fromLayer) out.push(`${path.relative(ROOT, file)} -> ${spec} (${from} is below ${to})`);
  }
  return out;
}

describe('layering of src/', () => {
  const files = sourceFiles(SRC);

  it('finds the imports it checks (the parser is not blind)', () => {
    assert.deepEqual(
      relativeImports(
        `import a from './a.js';\nimport type { B } from '../b/b.js';\nexport { c } from './c.js';\nimport './d.js';\nconst e = await import('./e.js');`,
      ),
      ['./a.js', '../b/b.js', './c.js', './d.js', './e.js'],
    );
    assert.deepEqual(relativeImports(`import {\n  x,\n  type Y,\n} from '../sessions/manager.js';`), ['../sessions/manager.js']);
    assert.ok(files.length > 100, `src/ has its files (${files.length})`);
    const all = files.flatMap((file) => relativeImports(readFileSync(file, 'utf8')));
    assert.ok(all.length > 300, `imports were found (${all.length})`);
  });

  it('no folder imports from a folder above it', () => {
    assert.deepEqual(files.flatMap(violations), []);
  });

  // Issue 23: SSH is the transport's business. Everything else types against GuestTransport
  // (transport/guest-transport.ts), so another way to reach a guest replaces one folder.
  it('only src/transport/ imports ssh2 or the concrete SSH connection', () => {
    const ssh2Import = /\b(?:import|export)\s[^'"`;]*?\bfrom\s*['"]ssh2(?:\/[^'"]*)?['"]|\bimport\(\s*['"]ssh2['"]\s*\)|\brequire\(\s*['"]ssh2['"]\s*\)/;
    assert.ok(
      ssh2Import.test(`import type { ClientChannel } from 'ssh2';`) && ssh2Import.test(`import ssh2 from "ssh2";`),
      'the pattern sees an import of ssh2',
    );
    const outside = files.filter((file) => topOf(file) !== 'transport');
    const offenders = outside.flatMap((file) => {
      const source = readFileSync(file, 'utf8');
      const out: string[] = [];
      if (ssh2Import.test(source)) out.push(`${path.relative(ROOT, file)} imports ssh2`);
      for (const spec of relativeImports(source)) {
        // The SSH implementation (ssh-connection, ssh-channels, ssh-sftp, ssh-errors); the
        // session's key material (ssh-keys.ts) is data every layer may handle.
        if (/\/transport\/ssh-(?!keys\.js$)[^/]+\.js$/.test(spec)) out.push(`${path.relative(ROOT, file)} -> ${spec} (use transport/index.js)`);
      }
      return out;
    });
    assert.deepEqual(offenders, []);
  });

  it(`no hand-written file in src/ is over ${MAX_LINES} lines`, () => {
    const long = files
      .filter((file) => !GENERATED.has(path.relative(SRC, file)) && !GENERATED_DIRS.some((dir) => path.relative(SRC, file).startsWith(dir)))
      .map((file) => ({ file: path.relative(ROOT, file), lines: readFileSync(file, 'utf8').split('\n').length - 1 }))
      .filter(({ lines }) => lines > MAX_LINES);
    assert.deepEqual(long, []);
  });
});
