import { readFileSync } from 'node:fs';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';

/**
 * Holds requests (and the test server's own answers) to the Firecracker API spec: the
 * committed OpenAPI 3 conversion of the official v1.16.1 file. Method and path must be an
 * operation of the spec; a body must match the operation's schema (required fields, types,
 * enums, minimum/maximum, formats) as ajv reads it.
 *
 * One deliberate tightening: the spec never says `additionalProperties`, so by the letter of
 * JSON Schema an unknown field is fine. Firecracker disagrees: its request structs are
 * deserialized with serde's `deny_unknown_fields`, and a stray field is a 400. So every object
 * schema that does not say otherwise is compiled with `additionalProperties: false` (the one
 * schema that says `true`, MmdsContentsObject, keeps it).
 */

const SPEC_URL = new URL('../../../src/runtimes/firecracker/api/firecracker-openapi.json', import.meta.url);
const SCHEMA_ID = 'firecracker-openapi.json';

type JsonObject = { [key: string]: unknown };

interface Operation {
  operationId: string;
  summary?: string;
  requestBody?: { required?: boolean; content: { 'application/json': { schema: JsonObject } } };
  responses: Record<string, { content?: { 'application/json': { schema: JsonObject } } }>;
}

interface OpenApiDocument {
  info: { version: string };
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, JsonObject> };
}

/** An operation of the spec that a request matched. */
export interface MatchedOperation {
  method: string;
  /** The spec's path template, e.g. "/drives/{drive_id}". */
  template: string;
  operationId: string;
  summary: string;
  pathParams: Record<string, string>;
}

export type RequestCheck = { ok: true; operation: MatchedOperation; body: unknown } | { ok: false; operation?: MatchedOperation; fault: string };

interface CompiledOperation extends MatchedOperation {
  pattern: RegExp;
  paramNames: string[];
  bodyRequired: boolean;
  validateBody?: ValidateFunction;
  /** Per documented status ("204", "400", "default"): its body schema, or null for no body. */
  validateResponses: Map<string, ValidateFunction | null>;
}

export class FirecrackerSpecValidator {
  readonly version: string;
  private readonly ajv: Ajv;
  private readonly operations: CompiledOperation[] = [];

  constructor(document: OpenApiDocument = JSON.parse(readFileSync(SPEC_URL, 'utf8')) as OpenApiDocument) {
    this.version = document.info.version;
    this.ajv = new Ajv({ allErrors: true, strict: true });
    // OpenAPI's `example` is documentation only; ajv's strict mode needs to be told so.
    this.ajv.addKeyword({ keyword: 'example', schemaType: ['string', 'number', 'boolean', 'object', 'array'] });
    registerFormats(this.ajv, document.components.schemas);
    // Registered under `definitions` (a keyword JSON Schema knows), and every reference
    // "#/components/schemas/X" is rewritten to point there.
    this.ajv.addSchema({ $id: SCHEMA_ID, definitions: closeObjects(document.components.schemas) });

    for (const [template, item] of Object.entries(document.paths)) {
      const paramNames = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] as string);
      const pattern = new RegExp(`^${template.replace(/\{[^}]+\}/g, '([^/]+)')}$`);
      for (const [method, operation] of Object.entries(item)) {
        const bodySchema = operation.requestBody?.content['application/json'].schema;
        const validateResponses = new Map<string, ValidateFunction | null>();
        for (const [status, response] of Object.entries(operation.responses)) {
          const schema = response.content?.['application/json'].schema;
          validateResponses.set(status, schema ? this.compile(schema) : null);
        }
        this.operations.push({
          method: method.toUpperCase(),
          template,
          operationId: operation.operationId,
          summary: operation.summary ?? '',
          pathParams: {},
          pattern,
          paramNames,
          bodyRequired: operation.requestBody?.required === true,
          validateBody: bodySchema ? this.compile(bodySchema) : undefined,
          validateResponses,
        });
      }
    }
  }

  /** The operation of the spec for this method and path, if there is one. */
  match(method: string, path: string): MatchedOperation | undefined {
    return this.find(method, path)?.operation;
  }

  /** Checks a request as Firecracker's API server would before acting on it. */
  checkRequest(method: string, path: string, bodyText: string): RequestCheck {
    const found = this.find(method, path);
    if (!found) return { ok: false, fault: `Invalid request method and/or path: ${method} ${path}.` };
    const { compiled, operation } = found;
    if (!bodyText) {
      if (compiled.bodyRequired) return { ok: false, operation, fault: `${method} ${path}: the request needs a JSON body.` };
      return { ok: true, operation, body: undefined };
    }
    if (!compiled.validateBody) return { ok: false, operation, fault: `${method} request cannot have a body.` };
    let body: unknown;
    try {
      body = JSON.parse(bodyText);
    } catch (err) {
      return { ok: false, operation, fault: `The body of the request is not valid JSON: ${(err as Error).message}` };
    }
    if (!compiled.validateBody(body)) {
      return { ok: false, operation, fault: `Invalid ${compiled.operationId} body: ${describe(compiled.validateBody.errors)}` };
    }
    return { ok: true, operation, body };
  }

  /** Errors of an answer against the spec's response schema for that status ("default" if none), or undefined. */
  checkResponse(operation: MatchedOperation, status: number, body: unknown): string | undefined {
    const responses = this.operations.find((o) => o.operationId === operation.operationId)?.validateResponses;
    const key = responses?.has(String(status)) ? String(status) : 'default';
    const validate = responses?.get(key);
    if (validate === undefined) return `${operation.operationId} documents no ${status} answer`;
    if (validate === null) return body === undefined ? undefined : `${operation.operationId} ${status} has no body in the spec`;
    return validate(body) ? undefined : describe(validate.errors);
  }

  /** A validator for one of the spec's component schemas, e.g. "Drive". */
  schema(name: string): ValidateFunction {
    return this.compile({ $ref: `#/components/schemas/${name}` });
  }

  private find(method: string, path: string): { compiled: CompiledOperation; operation: MatchedOperation } | undefined {
    for (const compiled of this.operations) {
      if (compiled.method !== method) continue;
      const m = compiled.pattern.exec(path);
      if (!m) continue;
      const pathParams: Record<string, string> = {};
      compiled.paramNames.forEach((name, i) => (pathParams[name] = decodeURIComponent(m[i + 1] as string)));
      const { method: _m, template, operationId, summary } = compiled;
      return { compiled, operation: { method, template, operationId, summary, pathParams } };
    }
    return undefined;
  }

  private compile(schema: JsonObject): ValidateFunction {
    return this.ajv.compile(rebase(schema));
  }
}

function describe(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? [])
    .map(
      (e) =>
        `${e.instancePath || '(body)'} ${e.message ?? 'is invalid'}${e.keyword === 'additionalProperties' ? ` (${String(e.params.additionalProperty)})` : ''}`,
    )
    .join('; ');
}

/** Adds `additionalProperties: false` to every object schema that does not state it (see the file comment). */
function closeObjects(schemas: Record<string, JsonObject>): Record<string, JsonObject> {
  const close = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(close);
    if (node === null || typeof node !== 'object') return node;
    const out: JsonObject = {};
    for (const [key, value] of Object.entries(node)) out[key] = key === 'properties' ? mapValues(value as JsonObject, close) : close(value);
    if (out.type === 'object' && out.properties && !('additionalProperties' in out)) out.additionalProperties = false;
    return out;
  };
  return mapValues(rebase(schemas), (s) => close(s) as JsonObject);
}

/** Points "#/components/schemas/X" references at the registered copy of the schemas. */
function rebase<T>(schema: T): T {
  return JSON.parse(JSON.stringify(schema).replaceAll('"#/components/schemas/', `"${SCHEMA_ID}#/definitions/`)) as T;
}

function mapValues<T, U>(record: Record<string, T>, fn: (value: T) => U): Record<string, U> {
  return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, fn(v)]));
}

/**
 * The spec's formats: int32 and int64 (OpenAPI's integer widths), and one quirk, the MMDS
 * `ipv4_address`, whose `format` holds a regular expression instead of a format name; it
 * is applied as an anchored pattern. A format not listed here stops the validator from
 * loading, so a new one in a later spec is noticed rather than waved through.
 */
function registerFormats(ajv: Ajv, schemas: Record<string, JsonObject>): void {
  ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isSafeInteger(n) });
  const formats = new Set([...JSON.stringify(schemas).matchAll(/"format":"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`) as string));
  for (const format of formats) {
    if (format === 'int32' || format === 'int64') continue;
    if (!format.startsWith('169.254.')) throw new Error(`the Firecracker spec uses a format the validator does not know: ${format}`);
    const pattern = new RegExp(`^${format}$`);
    ajv.addFormat(format, { type: 'string', validate: (s: string) => pattern.test(s) });
  }
}
