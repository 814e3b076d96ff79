/**
 * The image and the operator's walk-through of the Kubernetes deployment (issue 22;
 * deploy/Dockerfile, docs/cluster.md "Kubernetes: from an empty cluster to a first session"):
 * the image installs what scripts/setup.sh installs and keeps every package the server loads;
 * the walk-through's `sbx` and `kubectl` lines name commands, options and objects that exist,
 * and its secret snippets, run as written, write what the manifests read. There is no Docker
 * engine and no API server here: the image is not built and nothing is applied.
 */
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { transformSync } from 'esbuild';
import { run } from '../../src/util/exec.js';
import {
  BASE,
  DEPLOY,
  KUSTOMIZATION,
  ROOT,
  TRY_IT,
  containersOf,
  find,
  podTemplateOf,
  readKustomization,
  renderKustomization,
  sbxInScript,
  schemaProblem,
  surfaceProblems,
  type PodSpec,
} from '../helpers/kubernetes-manifests.js';

const DOCS = readFileSync(path.join(ROOT, 'docs', 'cluster.md'), 'utf8');
const SECTION = DOCS.slice(DOCS.indexOf('## Kubernetes: from an empty cluster to a first session'));
/** The walk-through's shell blocks. */
const BLOCKS = [...SECTION.matchAll(/^```sh\n([\s\S]*?)^```/gm)].map((m) => m[1]!);
const TRY_IT_OBJECTS = renderKustomization(TRY_IT);
const nodePod = podTemplateOf(find(TRY_IT_OBJECTS, 'DaemonSet', 'sbx-node')!)!.spec;

describe('the Kubernetes image and walk-through (deploy/Dockerfile, docs/cluster.md)', () => {
  it('the walk-through has its section and its steps', () => {
    assert.ok(DOCS.includes('## Kubernetes: from an empty cluster to a first session'));
    assert.ok(BLOCKS.length >= 8, `only ${BLOCKS.length} shell blocks`);
  });

  it('every sbx command line of the walk-through uses the agreed CLI surface', () => {
    const documented = sbxInScript(BLOCKS.join('\n'), 'docs/cluster.md');
    assert.ok(documented.length >= 4, `only ${documented.length} sbx commands in the walk-through`);
    assert.deepEqual(surfaceProblems(documented), []);
  });

  it("the walk-through's kubectl commands name what the manifests make: namespace, workloads, containers, ports, label and taint", () => {
    const lines = BLOCKS.flatMap((b) => b.split('\n')).filter((l) => l.startsWith('kubectl '));
    assert.ok(lines.length >= 10, `only ${lines.length} kubectl lines`);
    const objects = TRY_IT_OBJECTS;
    const kinds: Record<string, string> = {
      deploy: 'Deployment',
      deployment: 'Deployment',
      daemonset: 'DaemonSet',
      statefulset: 'StatefulSet',
      svc: 'Service',
    };
    const problems: string[] = [];
    for (const line of lines) {
      // kubectl's own words: what follows `--` is the command run in the pod.
      const all = line.replace(/\s+#.*$/, '').split(/\s+/);
      const words = all.includes('--') ? all.slice(0, all.indexOf('--')) : all;
      const ns = words[words.indexOf('-n') + 1];
      if (words.includes('-n') && ns !== readKustomization(BASE).namespace) problems.push(`${line}: namespace ${ns}`);
      if (words.includes('apply') && !existsSync(path.join(ROOT, words[words.indexOf('-k') + 1]!, KUSTOMIZATION)))
        problems.push(`${line}: no kustomization there`);
      const label = /^kubectl label node \S+ ([^=\s]+)=(\S+)$/.exec(line);
      if (label && nodePod.nodeSelector?.[label[1]!] !== label[2]) problems.push(`${line}: not the DaemonSet's nodeSelector`);
      const taint = /^kubectl taint node \S+ ([^=\s]+)=([^:\s]+):(\S+)/.exec(line);
      const tolerations = (nodePod as PodSpec & { tolerations?: Array<{ key: string; value: string; effect: string }> }).tolerations ?? [];
      if (taint && !tolerations.some((t) => t.key === taint[1] && t.value === taint[2] && t.effect === taint[3]))
        problems.push(`${line}: the DaemonSet does not tolerate it`);
      for (const word of words) {
        const ref = /^([a-z]+)\/([a-z0-9-]+)$/.exec(word);
        if (!ref || !kinds[ref[1]!]) continue;
        const object = find(objects, kinds[ref[1]!]!, ref[2]!);
        if (!object) {
          problems.push(`${line}: no ${kinds[ref[1]!]} ${ref[2]}`);
          continue;
        }
        const container = words.includes('-c') ? words[words.indexOf('-c') + 1] : undefined;
        if (container && !containersOf(object).some((c) => c.name === container)) problems.push(`${line}: no container ${container}`);
        const forward = words.includes('port-forward') ? /^\d+:(\d+)$/.exec(words[words.indexOf(word) + 1] ?? '') : undefined;
        const ports = ((object.spec as { ports?: Array<{ port: number }> }).ports ?? []).map((p) => String(p.port));
        if (forward && !ports.includes(forward[1]!)) problems.push(`${line}: the Service has no port ${forward[1]}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it("deploy/Dockerfile: Debian 12 with Node 20, and scripts/setup.sh's packages less the test-only ones", () => {
    const dockerfile = readFileSync(path.join(ROOT, 'deploy', 'Dockerfile'), 'utf8');
    const setup = readFileSync(path.join(ROOT, 'scripts', 'setup.sh'), 'utf8');
    const setupPackages = (/^packages=\(([^)]*)\)/m.exec(setup)?.[1] ?? '').trim().split(/\s+/);
    assert.ok(setupPackages.includes('runc') && setupPackages.includes('qemu-system-x86'), "setup.sh's packages=(...) is read");
    const install = /apt-get install[^\n]*--no-install-recommends((?:[^&]|&(?!&))*)&&/.exec(dockerfile)?.[1] ?? '';
    const imagePackages = install.replace(/\\\n/g, ' ').trim().split(/\s+/).filter(Boolean);
    // Used by the tests and the benchmark only (the Dockerfile's comment says why each).
    const testOnly = ['shellcheck', 'chromium', 'fonts-liberation', 'postgresql', 'openssh-client'];
    assert.deepEqual(
      [...imagePackages].sort(),
      setupPackages.filter((p) => !testOnly.includes(p)).sort(),
      'a package added to setup.sh: install it in the image too, or call it test-only here and in the Dockerfile',
    );
    const stages = [...dockerfile.matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1]);
    assert.deepEqual(stages, ['node:20-bookworm', 'node:20-bookworm-slim']);
    assert.match(dockerfile, /npm ci\b/);
    assert.match(dockerfile, /npm run build/);
    assert.match(dockerfile, /ln -s \/opt\/sbx\/dist\/cli\/main\.js \/usr\/local\/bin\/sbx/, 'the manifests run `sbx`');
    const ignore = readFileSync(path.join(ROOT, 'deploy', 'Dockerfile.dockerignore'), 'utf8');
    assert.match(ignore, /^deploy\/kubernetes\/\*\*\/\*\.env$/m, "the operator's secrets never enter the build context");
    // What the build copies from the context (the repository's root) exists and is not ignored.
    const ignored = ignore
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    const copied = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1]!.split(/\s+/));
    assert.deepEqual(copied, ['package.json', 'package-lock.json', 'tsconfig.json', 'src']);
    for (const source of copied) {
      assert.ok(existsSync(path.join(ROOT, source)), `COPY ${source}: not in the repository`);
      assert.ok(!ignored.includes(source), `COPY ${source}: ignored by Dockerfile.dockerignore`);
    }
    // The image the manifests name is the one the kustomization rewrites.
    const images = new Set(renderKustomization(DEPLOY).flatMap(({ object }) => containersOf(object).map((c) => c.image)));
    // ... tagged with this release's version, as the walk-through's `docker build -t` is.
    const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
    assert.deepEqual([...images], [`registry.example.com/sandbox-orchestrator:${version}`]);
    assert.ok(BLOCKS.some((b) => b.includes(`docker build -f deploy/Dockerfile -t registry.example.com/sandbox-orchestrator:${version} .`)));
  });

  it('the image keeps only the production dependencies (npm prune --omit=dev): every package the server loads stays', (t) => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    const lock = JSON.parse(readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
    /** What `npm prune --omit=dev` leaves: every locked package not marked dev-only. */
    const kept = (name: string) => lock.packages[`node_modules/${name}`] !== undefined && lock.packages[`node_modules/${name}`]?.dev !== true;
    /** The packages a TypeScript source loads at run time (esbuild drops type-only imports, as tsc does). */
    const packagesLoadedBy = (source: string) => {
      const code = transformSync(source, { loader: 'ts' }).code;
      const statements = /^(?:import|export)\b[^;]*?\bfrom\s*"([^"]+)"|^import\s*"([^"]+)"|\b(?:import|require|require\.resolve)\(\s*"([^"]+)"\s*\)/gm;
      return [...code.matchAll(statements)]
        .map((m) => (m[1] ?? m[2] ?? m[3])!)
        .filter((specifier) => !specifier.startsWith('.') && !specifier.startsWith('node:'))
        .map((specifier) => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!));
    };
    const seen = new Set<string>();
    const problems: string[] = [];
    const undeclared = new Set<string>();
    const files = readdirSync(path.join(ROOT, 'src'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts') && !f.startsWith('bench/'));
    for (const f of files) {
      for (const name of packagesLoadedBy(readFileSync(path.join(ROOT, 'src', f), 'utf8'))) {
        seen.add(name);
        if (!kept(name)) problems.push(`src/${f}: ${name}`);
        else if (!(name in pkg.dependencies)) undeclared.add(`${name} (src/${f})`);
      }
    }
    assert.deepEqual(problems, [], 'loaded at run time but dev-only: the image, which has no devDependencies, would fail to load it');
    // Present only because a dependency brings it: works, but should be declared.
    if (undeclared.size > 0)
      t.diagnostic(`loaded at run time, in the image only as another package's dependency (declare it in "dependencies"): ${[...undeclared].join(', ')}`);
    for (const name of ['fastify', 'better-sqlite3', '@novnc/novnc']) assert.ok(seen.has(name), `the scan missed ${name}`);
    // The check itself: a value import of a devDependency is seen, a type-only one is not.
    assert.deepEqual(packagesLoadedBy("import fc from 'fast-check';\nimport type { WebSocket } from 'ws';\nexport const a = fc; export type B = WebSocket;"), [
      'fast-check',
    ]);
    assert.equal(kept('fast-check'), false);
    assert.equal(kept('fastify'), true);
  });

  it("the walk-through's secret snippets write env files Kustomize takes: private, the try-it password in the URL, a 256-bit credential", async () => {
    const blocks = [...DOCS.slice(DOCS.indexOf('### 3. Write the secrets')).matchAll(/^```sh\n([\s\S]*?)^```/gm)].map((m) => m[1]!).slice(0, 2);
    assert.equal(blocks.length, 2);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-k8s-secrets-'));
    try {
      for (const block of blocks) {
        rmSync(path.join(dir, 'deploy'), { recursive: true, force: true });
        cpSync(DEPLOY, path.join(dir, 'deploy', 'kubernetes'), { recursive: true });
        // Run as written, from the repository's root (a copy of deploy/ under a scratch dir).
        const res = await run(['sh', '-euc', block], { cwd: dir, allowFailure: true });
        assert.equal(res.exitCode, 0, `${block}\n${res.stderr}`);
      }
      // The second snippet (try-it) wrote both files last; the first wrote base/cluster.env.
      const kube = path.join(dir, 'deploy', 'kubernetes');
      for (const file of ['base/cluster.env', 'try-it/postgres.env']) {
        const mode = statSync(path.join(kube, file)).mode & 0o777;
        assert.equal(mode, 0o600, `${file}: mode ${mode.toString(8)}`);
      }
      const secrets = renderKustomization(path.join(kube, 'try-it'), '').filter((l) => l.object.kind === 'Secret');
      const value = (name: string, key: string) => Buffer.from((find(secrets, 'Secret', name)?.data as Record<string, string>)[key] ?? '', 'base64').toString();
      const password = value('sbx-postgres', 'POSTGRES_PASSWORD');
      assert.match(password, /^[0-9a-f]{48}$/);
      const url = new URL(value('sbx-cluster', 'SBX_CLUSTER_DB_URL'));
      assert.equal(url.password, password, 'the URL names the try-it server with its password');
      assert.equal(`${url.hostname}:${url.port}`, 'sbx-postgres.sbx.svc.cluster.local:5432');
      assert.equal(url.username, 'sbx');
      assert.match(value('sbx-cluster', 'SBX_CLUSTER_SECRET'), /^[0-9a-f]{64}$/, 'at least 32 characters (CLUSTER.md); 256 random bits');
      for (const { object } of secrets) assert.equal(schemaProblem(object), undefined);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
