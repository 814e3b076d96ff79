/**
 * Reading deploy/kubernetes the way Kustomize does, for test/unit/kubernetes-manifests.test.ts:
 * the YAML documents, the kustomizations (resources, namespace, images, secretGenerator), the
 * pod templates in them, and the `sbx` command lines their containers and shell hooks run.
 * Enough of Kustomize for these manifests, not all of it: when kubectl is installed, the test
 * compares this rendering with `kubectl kustomize`'s.
 */
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { DaemonSet, Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Namespace, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { parseAllDocuments } from 'yaml';
import { run } from '../../src/util/exec.js';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: Json | undefined;
}

/** An object and the file it came from (a generated Secret names its env file). */
export interface Loaded {
  readonly file: string;
  readonly object: K8sObject;
}

export interface Kustomization {
  resources?: string[];
  namespace?: string;
  images?: Array<{ name: string; newName?: string; newTag?: string }>;
  labels?: Array<{ pairs: Record<string, string>; includeSelectors?: boolean }>;
  secretGenerator?: Array<{ name: string; envs?: string[]; options?: { disableNameSuffixHash?: boolean } }>;
}

export const KUSTOMIZATION = 'kustomization.yaml';
export const ROOT = path.resolve(import.meta.dirname, '../..');
export const DEPLOY = path.join(ROOT, 'deploy', 'kubernetes');
export const BASE = path.join(DEPLOY, 'base');
export const TRY_IT = path.join(DEPLOY, 'try-it');

/** The kinds the deployment may use, each with its model (an unknown kind fails). */
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/DaemonSet': DaemonSet,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
};

/** What the kind's OpenAPI schema (kubernetes-models) says is wrong with an object, or undefined. */
export function schemaProblem(object: K8sObject): string | undefined {
  const type = `${object.apiVersion}/${object.kind}`;
  const Model = MODELS[type];
  if (!Model) return `${type} is not a kind this deployment knows (add its model to MODELS)`;
  try {
    new Model(object as never).validate();
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

export function find(objects: Loaded[], kind: string, name: string): K8sObject | undefined {
  return objects.find((l) => l.object.kind === kind && l.object.metadata.name === name)?.object;
}

/** Every YAML document of one file, refusing a file that does not parse or holds a non-object. */
export function loadYamlFile(file: string): K8sObject[] {
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(readFileSync(file, 'utf8'))) {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join('; ')}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue; // an empty document (a trailing ---)
    if (typeof value !== 'object' || Array.isArray(value)) throw new Error(`${file}: a document is not a mapping`);
    const object = value as K8sObject;
    if (typeof object.apiVersion !== 'string' || typeof object.kind !== 'string' || typeof object.metadata?.name !== 'string') {
      throw new Error(`${file}: a document without apiVersion, kind or metadata.name`);
    }
    objects.push(object);
  }
  return objects;
}

/** The YAML files of a folder and its subfolders, kustomization.yaml files included. */
export function yamlFilesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((name) => /\.ya?ml$/.test(name))
    .map((name) => path.join(dir, name))
    .filter((file) => statSync(file).isFile())
    .sort();
}

export function readKustomization(dir: string): Kustomization {
  const [doc] = parseAllDocuments(readFileSync(path.join(dir, KUSTOMIZATION), 'utf8'));
  if (!doc || doc.errors.length > 0) throw new Error(`${dir}/${KUSTOMIZATION} does not parse`);
  return doc.toJS() as Kustomization;
}

/** KEY=VALUE lines of an env file, as Kustomize reads them (comments and blank lines skipped). */
export function readEnvFile(file: string): Record<string, string> {
  const pairs: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const text = line.trim();
    if (text === '' || text.startsWith('#')) continue;
    const eq = text.indexOf('=');
    if (eq <= 0) throw new Error(`${file}: "${text}" is not KEY=VALUE`);
    pairs[text.slice(0, eq)] = text.slice(eq + 1);
  }
  return pairs;
}

/** Kinds that live outside namespaces (Kustomize's namespace does not apply to them). */
const CLUSTER_SCOPED = new Set(['Namespace']);

/**
 * What `kubectl kustomize <dir>` would output, minus what does not matter here. A generator's
 * env file is read from its committed `.example` twin by default: the real one holds the
 * operator's secrets and is not in the repository.
 */
export function renderKustomization(dir: string, envSuffix = '.example'): Loaded[] {
  const k = readKustomization(dir);
  const out: Loaded[] = [];
  for (const resource of k.resources ?? []) {
    const target = path.resolve(dir, resource);
    if (existsSync(path.join(target, KUSTOMIZATION))) out.push(...renderKustomization(target, envSuffix));
    else out.push(...loadYamlFile(target).map((object) => ({ file: target, object })));
  }
  for (const generator of k.secretGenerator ?? []) {
    const data: Record<string, string> = {};
    for (const env of generator.envs ?? []) {
      for (const [key, value] of Object.entries(readEnvFile(path.join(dir, `${env}${envSuffix}`)))) data[key] = Buffer.from(value).toString('base64');
    }
    out.push({ file: path.join(dir, KUSTOMIZATION), object: { apiVersion: 'v1', kind: 'Secret', metadata: { name: generator.name }, type: 'Opaque', data } });
  }
  for (const { object } of out) {
    if (k.namespace && !CLUSTER_SCOPED.has(object.kind)) object.metadata.namespace = k.namespace;
    for (const label of k.labels ?? []) object.metadata.labels = { ...object.metadata.labels, ...label.pairs };
    for (const container of containersOf(object)) {
      const image = k.images?.find((i) => i.name === container.image);
      if (image) container.image = `${image.newName ?? image.name}${image.newTag ? `:${image.newTag}` : ''}`;
    }
  }
  return out;
}

export interface Probe {
  httpGet?: { path?: string; port: number | string };
  tcpSocket?: { port: number | string };
  exec?: { command?: string[] };
}

export interface Container {
  name: string;
  image?: string;
  command?: string[];
  args?: string[];
  env?: Array<{
    name: string;
    value?: string;
    valueFrom?: { secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string; key: string }; fieldRef?: { fieldPath: string } };
  }>;
  envFrom?: Array<{ secretRef?: { name: string }; configMapRef?: { name: string } }>;
  ports?: Array<{ name?: string; containerPort: number }>;
  securityContext?: Record<string, Json>;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  lifecycle?: { preStop?: Probe; postStart?: Probe };
  volumeMounts?: Array<{ name: string; mountPath: string; mountPropagation?: string }>;
}

export interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  serviceAccountName?: string;
  automountServiceAccountToken?: boolean;
  hostNetwork?: boolean;
  hostPID?: boolean;
  nodeSelector?: Record<string, string>;
  securityContext?: Record<string, Json>;
  terminationGracePeriodSeconds?: number;
  volumes?: Array<{ name: string; hostPath?: { path: string; type?: string }; secret?: { secretName: string }; configMap?: { name: string }; emptyDir?: Json }>;
}

export interface PodTemplate {
  metadata: { labels?: Record<string, string> };
  spec: PodSpec;
}

/** The pod template of a workload (DaemonSet, Deployment, StatefulSet), if it is one. */
export function podTemplateOf(object: K8sObject): PodTemplate | undefined {
  const spec = object.spec as { template?: PodTemplate } | undefined;
  return ['DaemonSet', 'Deployment', 'StatefulSet'].includes(object.kind) ? spec?.template : undefined;
}

export function containersOf(object: K8sObject): Container[] {
  const pod = podTemplateOf(object);
  return pod ? [...(pod.spec.initContainers ?? []), ...pod.spec.containers] : [];
}

/** Does a label selector's matchLabels (or a Service's plain selector) select these labels? */
export function selects(selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  if (!selector || Object.keys(selector).length === 0) return false;
  return Object.entries(selector).every(([key, value]) => labels?.[key] === value);
}

/** One `sbx` command line: the subcommand path (`node drain`) and its words after it. */
export interface SbxInvocation {
  readonly where: string;
  readonly words: string[];
}

/** Splits a shell line into words, dropping quotes (enough for the hooks written here). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  for (const match of line.matchAll(/"((?:[^"\\]|\\.)*)"|'([^']*)'|(\|\||&&|[|;<>])|([^\s"'|;&<>]+)/g)) {
    words.push(match[1] ?? match[2] ?? match[3] ?? match[4] ?? '');
  }
  return words;
}

/** The `sbx` command lines of a shell script: each starts at `sbx` and ends at an operator. */
export function sbxInScript(script: string, where: string): SbxInvocation[] {
  const found: SbxInvocation[] = [];
  for (const line of script.replace(/\\\n/g, ' ').split('\n')) {
    const words = shellWords(line);
    for (let i = 0; i < words.length; i++) {
      // `sh -c '<script>'` (e.g. through kubectl exec): the script's own command lines.
      if (i >= 2 && words[i - 1] === '-c' && ['sh', 'bash'].includes(words[i - 2] as string)) found.push(...sbxInScript(words[i] as string, where));
      // At a command's start: a line's, after an operator, `exec`, or `--` (kubectl exec ... -- sbx).
      const atStart = i === 0 || ['||', '&&', '|', ';', 'exec', '--'].includes(words[i - 1] as string);
      if (words[i] !== 'sbx' || !atStart) continue;
      const end = words.findIndex((w, j) => j > i && ['||', '&&', '|', ';', '<', '>'].includes(w));
      found.push({ where, words: words.slice(i + 1, end === -1 ? undefined : end) });
    }
  }
  return found;
}

/** A shell script a container or hook runs (`sh -c <script>`), if it is one. */
export function shellScriptOf(command: string[] | undefined): string | undefined {
  return command && command.length === 3 && ['sh', 'bash', '/bin/sh', '/bin/bash'].includes(command[0] as string) && command[1] === '-c'
    ? command[2]
    : undefined;
}

/** Every `sbx` invocation of a workload: containers' command + args, and shell scripts in hooks. */
export function sbxInvocationsOf(object: K8sObject): SbxInvocation[] {
  const found: SbxInvocation[] = [];
  for (const c of containersOf(object)) {
    const where = `${object.kind}/${object.metadata.name} container ${c.name}`;
    const argv = [...(c.command ?? []), ...(c.args ?? [])];
    const script = shellScriptOf(c.command);
    if (script !== undefined) found.push(...sbxInScript(script, where));
    else if (argv[0] === 'sbx') found.push({ where, words: argv.slice(1) });
    for (const [hook, handler] of Object.entries(c.lifecycle ?? {})) {
      const hookScript = shellScriptOf(handler?.exec?.command);
      if (hookScript !== undefined) found.push(...sbxInScript(hookScript, `${where} ${hook}`));
    }
  }
  return found;
}

/**
 * The CLI surface the cluster helpers agreed on (issue 22, the shared plan; docs/cluster.md):
 * each command path with the options it takes and how many positional arguments. `node`
 * takes every `sbx serve` option too; only those a manifest may want are listed.
 */
export const SBX_SURFACE: Record<string, { options: string[]; positional: number }> = {
  node: { options: ['--cluster', '--advertise', '--name', '--host', '--port', '--state-dir', '--runtime', '--warm-pool'], positional: 0 },
  gateway: { options: ['--db', '--host', '--port'], positional: 0 },
  nodes: { options: ['--db'], positional: 0 },
  'node drain': { options: ['--db'], positional: 1 },
  'node undrain': { options: ['--db'], positional: 1 },
  'keys create': { options: ['--db', '--tenant', '--expires-in'], positional: 0 },
  'keys list': { options: ['--db'], positional: 0 },
  'keys revoke': { options: ['--db'], positional: 1 },
  'image build': { options: ['--template', '--force', '--images-dir'], positional: 0 },
};

/** Options that are switches (take no value). */
const SWITCHES = new Set(['--force']);

/** The command path of an invocation and its options, or why it is not of the surface. */
export function parseInvocation(words: readonly string[]): { path: string; options: string[]; positional: string[] } | { problem: string } {
  const two = words.slice(0, 2).join(' ');
  const path = SBX_SURFACE[two] ? two : SBX_SURFACE[words[0] ?? ''] ? (words[0] as string) : undefined;
  if (!path) return { problem: `sbx ${words.slice(0, 2).join(' ')}: no such command in the agreed surface` };
  const options: string[] = [];
  const positional: string[] = [];
  const rest = words.slice(path.split(' ').length);
  for (let i = 0; i < rest.length; i++) {
    const word = rest[i] as string;
    if (word.startsWith('--')) {
      const [name] = word.split('=', 1) as [string];
      options.push(name);
      if (!word.includes('=') && !SWITCHES.has(name)) i++; // its value
    } else positional.push(word);
  }
  return { path, options, positional };
}

/**
 * Type-checks objects against kubernetes-models' TypeScript interfaces (`I<Kind>` of the
 * module named by apiVersion and kind): the compiler's excess-property check refuses a field
 * the API does not have, which the JSON schemas let through. `dir` must be under the
 * repository, so that node_modules resolves. Each error names the object it is in.
 */
export async function typeCheck(
  objects: Array<{ label: string; object: K8sObject }>,
  dir: string,
): Promise<{ errors: string[]; exitCode: number | null; output: string }> {
  const lines: string[] = [];
  objects.forEach(({ label, object }, i) => {
    lines.push(`// ${label}`);
    lines.push(`import type { I${object.kind} as T${i} } from 'kubernetes-models/${object.apiVersion}/${object.kind}';`);
    lines.push(`export const o${i}: T${i} = ${JSON.stringify(object, null, 2)};`);
  });
  const file = path.join(dir, `objects-${Math.random().toString(36).slice(2)}.ts`);
  writeFileSync(file, `${lines.join('\n')}\n`);
  const root = path.resolve(import.meta.dirname, '../..');
  const tsc = path.join(root, 'node_modules', '.bin', 'tsc');
  const res = await run(
    [tsc, '--ignoreConfig', '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--skipLibCheck', '--types', 'node', file],
    { allowFailure: true, timeoutMs: 60_000 },
  );
  const output = res.stdout + res.stderr;
  const text = lines.join('\n').split('\n');
  const errors = [...output.matchAll(/\((\d+),\d+\): error (TS\d+: .*)/g)].map((m) => {
    let at = Math.min(Number(m[1]) - 1, text.length - 1);
    while (at > 0 && !(text[at] as string).startsWith('// ')) at--;
    return `${(text[at] as string).slice(3)}: ${m[2]}`;
  });
  return { errors, exitCode: res.exitCode, output };
}

/** What in these command lines is not of the agreed surface (a command, an option, the arguments). */
export function surfaceProblems(invocations: readonly SbxInvocation[]): string[] {
  const problems: string[] = [];
  for (const { where, words } of invocations) {
    const parsed = parseInvocation(words);
    if ('problem' in parsed) {
      problems.push(`${where}: ${parsed.problem}`);
      continue;
    }
    const surface = SBX_SURFACE[parsed.path] as { options: string[]; positional: number };
    for (const option of parsed.options) if (!surface.options.includes(option)) problems.push(`${where}: sbx ${parsed.path} has no ${option}`);
    if (parsed.positional.length !== surface.positional)
      problems.push(`${where}: sbx ${parsed.path} takes ${surface.positional} arguments, not ${parsed.positional.join(' ')}`);
  }
  return problems;
}
