import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { transformSync } from 'esbuild';
import { HTTP_STATUS, httpStatusOf } from '../../src/api/errors.js';
import { errorFor } from '../../src/client/errors.js';
import { ERROR_CATEGORIES, ERROR_CODES, type ErrorCode } from '../../src/error-codes.js';

/**
 * The docs cannot drift from the code unnoticed: every relative link in README.md and docs/
 * resolves (to a file, and to a heading when it names one), and the table of environment
 * variables in docs/configuration.md lists exactly the variables the code reads. No root,
 * no sandbox: it reads files.
 */

const ROOT = path.resolve(import.meta.dirname, '../..');
const CONFIGURATION_DOC = path.join(ROOT, 'docs', 'configuration.md');
const API_DOC = path.join(ROOT, 'docs', 'api.md');

function filesUnder(dir: string, suffix: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith(suffix))
    .map((name) => path.join(dir, name))
    .filter((file) => statSync(file).isFile());
}

function markdownFiles(): string[] {
  return [path.join(ROOT, 'README.md'), ...filesUnder(path.join(ROOT, 'docs'), '.md')];
}

/** The text outside fenced code blocks and inline code, where a link is a link. */
function proseOf(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
}

/** The targets of inline links `[text](target)` and reference definitions `[id]: target`. */
export function linkTargets(markdown: string): string[] {
  const prose = proseOf(markdown);
  const inline = [...prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1] as string);
  const references = [...prose.matchAll(/^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)].map((m) => m[1] as string);
  return [...inline, ...references];
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes. */
export function headingAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const match of proseOf(readFileSync(file, 'utf8')).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = headingAnchor(match[1] as string);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** What is wrong with one link of `file`, or undefined if it resolves. External links are not fetched. */
function brokenLink(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto:
  const [pathPart = '', anchor] = target.split('#', 2);
  const resolved = pathPart === '' ? file : path.resolve(path.dirname(file), decodeURIComponent(pathPart));
  if (!resolved.startsWith(ROOT + path.sep)) return `${target}: points outside the repository`;
  if (!existsSync(resolved)) return `${target}: no such file or folder`;
  if (anchor !== undefined && resolved.endsWith('.md') && !anchorsOf(resolved).has(anchor)) {
    return `${target}: ${path.relative(ROOT, resolved)} has no heading #${anchor}`;
  }
  return undefined;
}

/** Names of environment variables that are the system's, not our configuration. */
const SYSTEM_VARIABLES = new Set(['PATH']);

/**
 * The environment variables the code reads: every SBX_* name in the code (the settings
 * modules read them by name, e.g. envInt('SBX_PORT', ...), and error messages name them),
 * and every other name read as `env.NAME`, `env['NAME']` or by the helpers of src/util/env.ts
 * (`envOptional(env, 'NAME')`, `envString(env, 'NAME', ...)`). Comments do not count: the
 * source is first put through esbuild (the compiler tsx runs these tests with), which drops
 * them and leaves the code and its strings as they are.
 */
export function variablesReadIn(sourceText: string): Set<string> {
  const code = transformSync(sourceText, { loader: 'ts', legalComments: 'none' }).code;
  const names = new Set<string>();
  for (const match of code.matchAll(/\bSBX_[A-Z0-9_]*[A-Z0-9]\b/g)) names.add(match[0]);
  for (const match of code.matchAll(/\benv\??\.([A-Z][A-Z0-9_]+)\b|\benv\[\s*["'`]([A-Z][A-Z0-9_]+)["'`]\s*\]/g)) {
    names.add((match[1] ?? match[2]) as string);
  }
  for (const match of code.matchAll(/\benv[A-Z]\w*\(\s*(?:[\w.]+\s*,\s*)?["'`]([A-Z][A-Z0-9_]+)["'`]/g)) names.add(match[1] as string);
  for (const name of SYSTEM_VARIABLES) names.delete(name);
  return names;
}

/** The variables in the first column of configuration.md's table(s): rows starting with `| \`NAME\``. */
export function documentedVariables(markdown: string): Set<string> {
  const names = new Set<string>();
  for (const row of markdown.matchAll(/^\|([^|\n]+)\|/gm)) {
    for (const name of (row[1] as string).matchAll(/`([A-Z][A-Z0-9_]+)`/g)) names.add(name[1] as string);
  }
  return names;
}

/** The rows of api.md's error table: status, code, and the client error named in the last column. */
export function documentedErrors(markdown: string): Array<{ status: number; code: string; clientError: string }> {
  const rows: Array<{ status: number; code: string; clientError: string }> = [];
  for (const m of markdown.matchAll(/^\|\s*(\d{3})\s*\|\s*`([a-z0-9_]+)`\s*\|[^\n]*\|\s*`(\w+)`[^|\n]*\|\s*$/gm)) {
    rows.push({ status: Number(m[1]), code: m[2] as string, clientError: m[3] as string });
  }
  return rows;
}

describe('docs', () => {
  it('every relative link in README.md and docs/ resolves', () => {
    const problems: string[] = [];
    let links = 0;
    for (const file of markdownFiles()) {
      for (const target of linkTargets(readFileSync(file, 'utf8'))) {
        links++;
        const problem = brokenLink(file, target);
        if (problem) problems.push(`${path.relative(ROOT, file)}: ${problem}`);
      }
    }
    assert.deepEqual(problems, []);
    assert.ok(links > 20, `only ${links} links found: is the link pattern still right?`);
  });

  it('the link check sees a broken file, a broken heading and a link outside the repository', () => {
    const readme = path.join(ROOT, 'README.md');
    assert.match(brokenLink(readme, 'docs/nope.md') ?? '', /no such file/);
    assert.match(brokenLink(readme, 'docs/configuration.md#no-such-heading') ?? '', /no heading/);
    assert.match(brokenLink(readme, '../shared/DESIGN.md') ?? '', /outside the repository/);
    assert.equal(brokenLink(readme, 'docs/configuration.md#every-variable'), undefined);
    assert.deepEqual(linkTargets('a [b](c.md) `[d](e.md)`\n```\n[f](g.md)\n```\n[h]: i.md\n'), ['c.md', 'i.md']);
  });

  it('docs/configuration.md lists exactly the environment variables read in src/', () => {
    const read = new Set<string>();
    for (const file of filesUnder(path.join(ROOT, 'src'), '.ts')) {
      for (const name of variablesReadIn(readFileSync(file, 'utf8'))) read.add(name);
    }
    const documented = documentedVariables(readFileSync(CONFIGURATION_DOC, 'utf8'));
    const undocumented = [...read].filter((name) => !documented.has(name)).sort();
    const notRead = [...documented].filter((name) => !read.has(name)).sort();
    assert.deepEqual({ undocumented, notRead }, { undocumented: [], notRead: [] }, 'docs/configuration.md and src/ disagree');
    assert.ok(read.has('SBX_PORT') && read.has('RUNC_BIN'), 'the scan finds variables read by name and through env.NAME');
  });

  it('the variable scan ignores comments and finds names in strings and env reads', () => {
    const found = variablesReadIn(
      [
        '// SBX_IN_A_COMMENT',
        '/** SBX_IN_A_DOC_COMMENT */',
        "const a = envInt('SBX_BY_NAME', 1);",
        'const b = process.env.SBX_THROUGH_ENV;',
        "const helper = envOptional(env, 'HELPER_BIN');",
        'const c = env.OTHER_BIN ?? env["BRACKETED"] ?? process.env.PATH;',
        'throw new Error(`${x} SBX_IN_A_TEMPLATE=${y} and SBX_FC_* is a prefix`);',
      ].join('\n'),
    );
    assert.deepEqual([...found].sort(), ['BRACKETED', 'HELPER_BIN', 'OTHER_BIN', 'SBX_BY_NAME', 'SBX_IN_A_TEMPLATE', 'SBX_THROUGH_ENV']);
  });
  it('docs/api.md has one row per code of the error registry, with its status and the client error it maps to', () => {
    const rows = documentedErrors(readFileSync(API_DOC, 'utf8'));
    const byCode = new Map(rows.map((row) => [row.code, row]));
    assert.equal(byCode.size, rows.length, 'a code appears in two rows');
    const registered = Object.keys(ERROR_CODES) as ErrorCode[];
    const problems: string[] = [];
    for (const code of registered) {
      const row = byCode.get(code);
      if (!row) problems.push(`${code} is in the registry (src/error-codes.ts) but not in the table`);
      else if (row.status !== httpStatusOf(code)) problems.push(`${code} is answered with ${httpStatusOf(code)}, the table says ${row.status}`);
    }
    for (const row of rows) {
      if (!(row.code in ERROR_CODES)) problems.push(`${row.code} is in the table but not in the registry (src/error-codes.ts)`);
      const thrown = errorFor(row.status, row.code, 'message').constructor.name;
      if (thrown !== row.clientError) problems.push(`${row.code}: the client throws ${thrown}, the table says ${row.clientError}`);
    }
    assert.deepEqual(problems, []);
    assert.ok(rows.length > 25, `only ${rows.length} rows found: is the row pattern still right?`);
  });

  it('every registered error code is answered somewhere, and no answer bypasses the registry', () => {
    const registry = path.join(ROOT, 'src', 'error-codes.ts');
    const sources = filesUnder(path.join(ROOT, 'src'), '.ts').filter((file) => file !== registry);
    const code = sources.map((file) => transformSync(readFileSync(file, 'utf8'), { loader: 'ts', legalComments: 'none' }).code).join('\n');
    const unused = Object.keys(ERROR_CODES).filter((name) => !code.includes(`'${name}'`) && !code.includes(`"${name}"`));
    assert.deepEqual(unused, [], 'registered codes that nothing throws or answers');
    // A status written next to an error body is a second place for it: answers go through
    // api/errors.ts (sendError, or a thrown OrchestratorError), whose status comes from the registry.
    const bypassing = sources.flatMap((file) =>
      /\.status\(\s*\d{3}\s*\)\s*\.send\(\s*\{\s*error\s*:/.test(readFileSync(file, 'utf8')) ? [path.relative(ROOT, file)] : [],
    );
    assert.deepEqual(bypassing, []);
  });

  it("each category has one HTTP status, and the registry's categories are the ones the API maps", () => {
    assert.deepEqual(Object.keys(HTTP_STATUS).sort(), Object.keys(ERROR_CATEGORIES).sort());
    for (const [name, entry] of Object.entries(ERROR_CODES))
      assert.ok(entry.description.length > 0 && !entry.description.includes('\n'), `${name}: a one-line description`);
  });

  it('docs/api.md names every Prometheus metric the orchestrator exports', () => {
    const api = readFileSync(API_DOC, 'utf8');
    const exported = filesUnder(path.join(ROOT, 'src'), '.ts').flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(/\bname:\s*'(sandbox_[a-z0-9_]+)'/g)].map((m) => m[1] as string),
    );
    assert.ok(exported.length > 10, `only ${exported.length} metrics found: is the pattern still right?`);
    assert.deepEqual(
      exported.filter((name) => !api.includes(`\`${name}`)),
      [],
    );
  });
});
