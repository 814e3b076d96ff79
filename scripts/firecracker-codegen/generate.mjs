// Regenerates the Firecracker API layer's spec artefacts from the official Swagger 2.0 file:
//
//   src/runtimes/firecracker/api/firecracker-openapi.json  the spec converted to OpenAPI 3
//                                                         (swagger2openapi); the contract
//                                                         test server validates against it
//   src/runtimes/firecracker/api/spec-types.ts            TypeScript types (openapi-typescript)
//
// Both outputs are committed, so neither the build nor the tests need this script, its
// packages, or ../shared (read-only in CI). Run it when the Firecracker version changes:
//
//   npm run gen:firecracker [-- path/to/firecracker-vX.Y.Z.yaml]
//
// It lives in its own package (scripts/firecracker-codegen/package.json) because
// openapi-typescript drives the TypeScript 5 compiler API, which the project's own
// TypeScript 7 compiler no longer ships; keeping the two apart avoids a peer conflict.
import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import swagger2openapi from 'swagger2openapi';
import { isDeepStrictEqual } from 'node:util';
import { parse as parseYaml } from 'yaml';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '..', '..');
const specPath = path.resolve(repoRoot, process.argv[2] ?? '../shared/firecracker/firecracker-v1.16.1.yaml');
const outDir = path.join(repoRoot, 'src', 'runtimes', 'firecracker', 'api');

const specText = await readFile(specPath, 'utf8');
const sha256 = createHash('sha256').update(specText).digest('hex');

const swagger = parseYaml(specText);

// The v1.16.1 file has `termsOfService: ""`, which OpenAPI 3 forbids (it must be a URL), so
// the converter must be allowed to patch; it then drops that field. To be sure no patch
// touches the contract itself, every schema must come out exactly as it went in (only the
// $ref prefix changes), or the generation stops.
const options = { patch: true, warnOnly: false, refSiblings: 'preserve' };
const { openapi } = await swagger2openapi.convertObj(structuredClone(swagger), options);
const expectedSchemas = JSON.parse(JSON.stringify(swagger.definitions).replaceAll('#/definitions/', '#/components/schemas/'));
if (!isDeepStrictEqual(openapi.components.schemas, expectedSchemas)) {
  throw new Error('swagger2openapi changed a schema while converting; inspect the output before trusting it');
}
if (options.patches > 0) console.log(`swagger2openapi patched ${options.patches} non-schema issue(s) (e.g. the empty termsOfService)`);

const jsonPath = path.join(outDir, 'firecracker-openapi.json');
await writeFile(jsonPath, JSON.stringify(openapi, null, 2) + '\n');

// defaultNonNullable: false keeps a field with a `default` optional. openapi-typescript's
// default would make it required (right for responses, where the server fills it in), and
// then every request would have to spell out `cache_type`, `io_engine`, `smt` and the like.
const ast = await openapiTS(openapi, { exportType: true, defaultNonNullable: false });
const header = [
  '/**',
  ` * GENERATED FILE, do not edit. Types of the Firecracker API v${openapi.info.version}.`,
  ' *',
  ` * Source: ${path.basename(specPath)} (sha256 ${sha256}),`,
  ' * converted to OpenAPI 3 by swagger2openapi (firecracker-openapi.json beside this file),',
  ' * then to TypeScript by openapi-typescript.',
  ' * Regenerate with `npm run gen:firecracker` (see scripts/firecracker-codegen/generate.mjs).',
  ' */',
  '',
  '',
].join('\n');
const typesPath = path.join(outDir, 'spec-types.ts');
await writeFile(typesPath, header + astToString(ast));

console.log(`firecracker API v${openapi.info.version}: wrote ${path.relative(repoRoot, jsonPath)} and ${path.relative(repoRoot, typesPath)}`);
