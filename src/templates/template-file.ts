/**
 * A user template file (docs/templates.md): YAML or JSON, checked against a JSON schema, with
 * errors that name the field and, for YAML and JSON alike, the line it is on. Nothing in it
 * ever becomes part of a host command line: package names and paths are allow-listed here,
 * and the build passes them as argv elements or stdin (template-build.ts).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Node as YamlNode } from 'yaml';
import { CONFIG_MOUNT } from '../guest/contract.js';
import { MINIMAL_RECIPE } from '../guest/image/recipe.js';

/** Letters, digits and dashes, starting with a letter: a file and directory name everywhere. */
export const TEMPLATE_NAME_PATTERN = '^[a-z][a-z0-9-]{0,39}$';
/** Debian policy's package name (no version pins, no options: it cannot start with a dash). */
export const PACKAGE_NAME_PATTERN = '^[a-z0-9][a-z0-9+.-]{1,62}$';
/** Environment names the guest reads (sandbox-init, sbx-user-shell check the same shape). */
const ENV_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,63}$';
/**
 * Names a template may not set: they would change how the orchestrator's own commands run
 * in the guest (its helpers are found through PATH, bash reads BASH_ENV, the loader LD_*).
 * sandbox-init and sbx-user-shell skip them too.
 */
const RESERVED_ENV = /^(PATH|HOME|USER|LOGNAME|SHELL|DISPLAY|IFS|ENV|BASH_ENV|LD_.*|BASH_FUNC_.*)$/;

export interface TemplateFileEntry {
  /** Relative to the template file's directory, never outside it. */
  source: string;
  /** Absolute path in the guest. */
  target: string;
  /** Octal string, e.g. "0644" (default 0644). */
  mode: string;
  owner: 'user' | 'root';
}

/** A template as its file says, defaults applied. */
export interface TemplateDefinition {
  name: string;
  base: string;
  packages: string[];
  files: TemplateFileEntry[];
  /** Each a shell command run by /bin/sh inside the image, or an argv array run as is. */
  run: Array<string | string[]>;
  env: Record<string, string>;
  /** Apps started with the desktop, as the desktop user: argv arrays. */
  autostart: string[][];
  screen?: { width: number; height: number };
}

/** A template file that cannot be used; `problems` say which field and where. */
export class TemplateFileError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(`${file}: ${problems.join('; ')}`);
    this.name = 'TemplateFileError';
  }
}

// No control characters, no NUL: these strings end up in files the guest reads line by line.
const printable = { type: 'string', minLength: 1, maxLength: 4096, pattern: '^[^\\u0000-\\u001f\\u007f]*$' } as const;

const SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'base'],
  properties: {
    name: { type: 'string', pattern: TEMPLATE_NAME_PATTERN },
    base: { type: 'string', pattern: TEMPLATE_NAME_PATTERN },
    packages: { type: 'array', maxItems: 200, uniqueItems: true, items: { type: 'string', pattern: PACKAGE_NAME_PATTERN } },
    files: {
      type: 'array',
      maxItems: 200,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['source', 'target'],
        properties: {
          source: { ...printable, maxLength: 1024 },
          // Absolute, no "." or ".." component, no empty component.
          target: { type: 'string', maxLength: 1024, pattern: '^(/(?!\\.\\.?(/|$))[^/\\u0000-\\u001f\\u007f]+)+$' },
          mode: { type: 'string', pattern: '^0?[0-7]{3}$' },
          owner: { enum: ['user', 'root'] },
        },
      },
    },
    run: {
      type: 'array',
      maxItems: 100,
      items: { oneOf: [printable, { type: 'array', minItems: 1, maxItems: 256, items: { type: 'string', maxLength: 4096 } }] },
    },
    env: {
      type: 'object',
      maxProperties: 100,
      propertyNames: { pattern: ENV_NAME_PATTERN },
      additionalProperties: { type: 'string', maxLength: 4096, pattern: '^[^\\u0000-\\u001f\\u007f]*$' },
    },
    autostart: {
      type: 'array',
      maxItems: 20,
      // argv[0] without "=": env(1) would take it for an assignment.
      items: { type: 'array', minItems: 1, maxItems: 64, items: [{ ...printable, pattern: '^[^=\\u0000-\\u001f\\u007f]+$' }], additionalItems: printable },
    },
    screen: {
      type: 'object',
      additionalProperties: false,
      required: ['width', 'height'],
      properties: { width: { type: 'integer', minimum: 320, maximum: 7680 }, height: { type: 'integer', minimum: 240, maximum: 4320 } },
    },
  },
} as const;

const ajv = new Ajv({ allErrors: true, strict: false });
const validate = ajv.compile(SCHEMA);

/** Reads and checks a template file (.yaml, .yml or .json). */
export async function readTemplateFile(file: string): Promise<TemplateDefinition> {
  const text = await readFile(file, 'utf8').catch((err: unknown) => {
    throw new TemplateFileError(file, [`cannot read it: ${err instanceof Error ? err.message : String(err)}`]);
  });
  return parseTemplate(text, file);
}

/**
 * Parses and checks a template's text. YAML is a superset of JSON, so one parser serves both
 * and gives every node its position, which the errors turn into line numbers.
 */
export function parseTemplate(text: string, file = 'template'): TemplateDefinition {
  if (text.length > 256 * 1024) throw new TemplateFileError(file, ['the file is larger than 256 KiB']);
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true, prettyErrors: false });
  if (doc.errors.length > 0) {
    throw new TemplateFileError(
      file,
      doc.errors.map((e) => `line ${lines.linePos(e.pos[0]).line}: ${e.message.split('\n')[0]}`),
    );
  }
  const value: unknown = doc.toJS({ maxAliasCount: 10 });
  if (!validate(value)) {
    throw new TemplateFileError(
      file,
      (validate.errors ?? []).filter(relevant).map((e) => describe(e, doc.contents, lines)),
    );
  }
  const raw = value as Partial<TemplateDefinition> & {
    name: string;
    base: string;
    files?: Array<Partial<TemplateFileEntry> & { source: string; target: string }>;
  };
  const problems: string[] = [];
  for (const [index, entry] of (raw.files ?? []).entries()) {
    if (path.isAbsolute(entry.source) || path.normalize(entry.source).split(path.sep).includes('..')) {
      problems.push(`files[${index}].source: must be a path relative to the template file, inside its directory (got ${JSON.stringify(entry.source)})`);
    }
  }
  for (const [index, entry] of (raw.files ?? []).entries()) {
    if (isReservedTarget(entry.target)) {
      problems.push(
        `files[${index}].target: ${entry.target} is the orchestrator's own (the guest contract: sandbox-init, sshd_config, its helpers, the config mount, the template settings)`,
      );
    }
  }
  for (const name of Object.keys(raw.env ?? {})) {
    if (RESERVED_ENV.test(name)) problems.push(`env.${name}: reserved (it would change how the orchestrator's commands run in the guest)`);
  }
  if (raw.base === raw.name) problems.push(`base: a template cannot be its own base`);
  if (problems.length > 0) throw new TemplateFileError(file, problems);
  return {
    name: raw.name,
    base: raw.base,
    packages: raw.packages ?? [],
    files: (raw.files ?? []).map((entry) => ({ source: entry.source, target: entry.target, mode: entry.mode ?? '0644', owner: entry.owner ?? 'root' })),
    run: raw.run ?? [],
    env: raw.env ?? {},
    autostart: raw.autostart ?? [],
    ...(raw.screen ? { screen: raw.screen } : {}),
  };
}

/**
 * Paths a template's files may not replace: what the orchestrator relies on in every guest. A
 * `run` command could still change them; this keeps a file list from doing it by mistake.
 */
function isReservedTarget(target: string): boolean {
  const exact = new Set(MINIMAL_RECIPE.files.map((file) => file.target));
  const trees = [CONFIG_MOUNT, '/etc/sandbox/template'];
  return exact.has(target) || trees.some((tree) => target === tree || target.startsWith(`${tree}/`));
}

/** oneOf's own error repeats what its branches said; keep the specific ones. */
function relevant(error: ErrorObject): boolean {
  // A bad property name is said once, by its propertyNames error, not again by the pattern.
  return error.keyword !== 'oneOf' && error.keyword !== 'if' && error.propertyName === undefined;
}

/** "files[0].mode (line 7): must match ..." */
function describe(error: ErrorObject, root: unknown, lines: LineCounter): string {
  const segments = error.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
  let field = segments.reduce((acc, s) => (/^\d+$/.test(s) ? `${acc}[${s}]` : acc ? `${acc}.${s}` : s), '');
  let message = error.message ?? 'is not valid';
  const params = error.params as Record<string, unknown>;
  if (error.keyword === 'additionalProperties') {
    const extra = String(params.additionalProperty);
    field = field ? `${field}.${extra}` : extra;
    segments.push(extra);
    message = 'is not a known field';
  } else if (error.keyword === 'required') {
    const missing = String(params.missingProperty);
    field = field ? `${field}.${missing}` : missing;
    message = 'is required';
  } else if (error.keyword === 'propertyNames') {
    message = `has a name that is not allowed (${String(params.propertyName)}: letters, digits and _ only)`;
  } else if (error.keyword === 'pattern') {
    message = `${JSON.stringify(valueAt(root, segments))} is not allowed (must match ${String(params.pattern)})`;
  } else if (error.keyword === 'enum') {
    message = `must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
  }
  const line = lineOf(root, segments, lines);
  return `${field || '(top level)'}${line ? ` (line ${line})` : ''}: ${message}`;
}

function nodeAt(root: unknown, segments: string[]): YamlNode | undefined {
  let node = root as YamlNode | undefined;
  for (const segment of segments) {
    if (isMap(node)) {
      const pair = node.items.find((item) => isScalar(item.key) && String(item.key.value) === segment);
      if (!pair) return node;
      node = (pair.value ?? pair.key) as YamlNode;
    } else if (isSeq(node)) {
      const item = node.items[Number(segment)];
      if (!item) return node;
      node = item as YamlNode;
    } else {
      return node;
    }
  }
  return node;
}

function lineOf(root: unknown, segments: string[], lines: LineCounter): number | undefined {
  const node = nodeAt(root, segments);
  const offset = node?.range?.[0];
  return offset === undefined ? undefined : lines.linePos(offset).line;
}

function valueAt(root: unknown, segments: string[]): unknown {
  const node = nodeAt(root, segments);
  return isScalar(node) ? node.value : undefined;
}
