/**
 * The Kubernetes deployment (deploy/kubernetes, issue 22) without a Kubernetes: every object
 * is checked against the API's OpenAPI schemas (the `kubernetes-models` package validates
 * each one, and the TypeScript compiler refuses a field the API does not have, which the
 * schemas let through), then for what an operator would otherwise find out on a live cluster:
 * a Secret, key, ConfigMap, ServiceAccount or Service named but missing, a selector that
 * matches nothing, a node agent without /dev/kvm or without the drain, a gateway that runs as
 * root, an `sbx` flag that does not exist, the database URL where a sandbox could read it.
 * There is no API server here: nothing is applied. No root, no sandbox.
 */
import assert from 'node:assert/strict';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { run } from '../../src/util/exec.js';
import {
  BASE,
  DEPLOY,
  KUSTOMIZATION,
  ROOT,
  TRY_IT,
  containersOf,
  find,
  loadYamlFile,
  parseInvocation,
  podTemplateOf,
  readEnvFile,
  readKustomization,
  renderKustomization,
  sbxInScript,
  sbxInvocationsOf,
  schemaProblem,
  selects,
  shellScriptOf,
  surfaceProblems,
  typeCheck,
  yamlFilesUnder,
  type Container,
  type K8sObject,
  type Loaded,
  type PodSpec,
} from '../helpers/kubernetes-manifests.js';

const rel = (file: string) => path.relative(ROOT, file);

function manifestFiles(): string[] {
  return yamlFilesUnder(DEPLOY).filter((file) => path.basename(file) !== KUSTOMIZATION);
}

const renderings: Array<{ name: string; objects: Loaded[] }> = [
  { name: 'base', objects: renderKustomization(DEPLOY) },
  { name: 'try-it', objects: renderKustomization(TRY_IT) },
];

function only(kind: string, name: string): K8sObject {
  const object = find(renderings[0]!.objects, kind, name);
  assert.ok(object, `${kind}/${name} is not in the base`);
  return object;
}

const node = only('DaemonSet', 'sbx-node');
const gateway = only('Deployment', 'sbx-gateway');
const nodePod = podTemplateOf(node)!.spec;
const gatewayPod = podTemplateOf(gateway)!.spec;
const agent = nodePod.containers.find((c) => c.name === 'node')!;
const gatewayContainer = gatewayPod.containers[0]!;

function envOf(container: Container, name: string) {
  return container.env?.find((e) => e.name === name);
}

describe('Kubernetes manifests (deploy/kubernetes)', () => {
  let scratch: string | undefined;
  after(() => {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
    try {
      rmdirSync(path.join(ROOT, '.scratch')); // only if nothing else uses it
    } catch {
      // not empty, or gone
    }
  });

  it("every YAML document parses and passes its kind's OpenAPI schema (kubernetes-models); no unknown kind", () => {
    const problems: string[] = [];
    let count = 0;
    for (const file of manifestFiles()) {
      for (const object of loadYamlFile(file)) {
        count++;
        const problem = schemaProblem(object);
        if (problem) problems.push(`${rel(file)} ${object.kind}/${object.metadata.name}: ${problem}`);
      }
    }
    // The Secrets the kustomizations generate, too.
    for (const { name, objects } of renderings) {
      for (const { object } of objects.filter((l) => l.object.kind === 'Secret')) {
        const problem = schemaProblem(object);
        if (problem) problems.push(`${name}: Secret/${object.metadata.name}: ${problem}`);
      }
    }
    assert.deepEqual(problems, []);
    assert.ok(count >= 15, `only ${count} objects found under ${rel(DEPLOY)}`);
    // The check itself: a wrong type and an unknown kind are refused.
    const broken = structuredClone(node);
    (podTemplateOf(broken)!.spec as unknown as { hostNetwork: string }).hostNetwork = 'yes';
    assert.match(schemaProblem(broken) ?? '', /hostNetwork must be boolean/);
    assert.match(schemaProblem({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' } }) ?? '', /not a kind this deployment knows/);
  });

  it('every field is one the API has: a misspelt field would be dropped by the API server, not refused', async () => {
    // The schemas allow unknown fields; TypeScript's excess-property check does not. Each
    // object becomes a typed constant in a scratch file under the repository (so that
    // node_modules resolves) and the compiler reads it.
    mkdirSync(path.join(ROOT, '.scratch'), { recursive: true });
    scratch = mkdtempSync(path.join(ROOT, '.scratch', 'k8s-types-'));
    const objects = [...renderings[1]!.objects, ...renderings[0]!.objects.filter((l) => l.object.kind === 'Secret')];
    const all = await typeCheck(
      objects.map(({ file, object }) => ({ label: `${rel(file)} ${object.kind}/${object.metadata.name}`, object })),
      scratch,
    );
    assert.deepEqual(all.errors, []);
    assert.equal(all.exitCode, 0, all.output);
    // The check itself: the gateway's readOnlyRootFilesystem misspelt is refused.
    const typo = JSON.parse(JSON.stringify(gateway).replace('"readOnlyRootFilesystem"', '"readOnlyRootFilesytem"')) as K8sObject;
    const { errors } = await typeCheck([{ label: 'typo', object: typo }], scratch);
    assert.equal(errors.length, 1, errors.join('\n'));
    assert.match(errors[0]!, /^typo: TS2353: .*readOnlyRootFilesytem/);
  });

  it('each kustomization lists exactly the manifests of its folder; its secrets come from git-ignored env files with placeholder examples', () => {
    for (const dir of [DEPLOY, BASE, TRY_IT]) {
      const k = readKustomization(dir);
      const files = readdirSync(dir)
        .filter((name) => /\.ya?ml$/.test(name) && name !== KUSTOMIZATION)
        .sort();
      const listed = (k.resources ?? []).filter((r) => !existsSync(path.join(dir, r, KUSTOMIZATION)));
      assert.deepEqual([...listed].sort(), files, `${rel(dir)}/${KUSTOMIZATION} resources vs the folder's YAML files`);
      for (const r of k.resources ?? []) assert.ok(existsSync(path.join(dir, r)), `${rel(dir)}: ${r} does not exist`);
      for (const generator of k.secretGenerator ?? []) {
        assert.equal(generator.options?.disableNameSuffixHash, true, `${generator.name}: the workloads name it without a hash suffix`);
        for (const env of generator.envs ?? []) {
          const ignored = readFileSync(path.join(dir, '.gitignore'), 'utf8')
            .split('\n')
            .map((l) => l.trim());
          assert.ok(ignored.includes(env), `${rel(dir)}/.gitignore must list ${env} (it holds real secrets)`);
          const example = readEnvFile(path.join(dir, `${env}.example`));
          for (const [key, value] of Object.entries(example)) assert.match(value, /CHANGE-ME/, `${env}.example: ${key} must be an obvious placeholder`);
        }
      }
    }
    // The base's folder holds the base; try-it adds to it.
    assert.deepEqual(readKustomization(DEPLOY).resources, ['base']);
    assert.ok(readKustomization(TRY_IT).resources?.includes('../base'));
  });

  it('every Secret (and key), ConfigMap, ServiceAccount and Service a workload names exists in the same rendering; every $(VAR) is defined', () => {
    for (const { name, objects } of renderings) {
      const problems: string[] = [];
      const has = (kind: string, n: string) => find(objects, kind, n) !== undefined;
      const secretKeys = (n: string) => Object.keys((find(objects, 'Secret', n)?.data as Record<string, string> | undefined) ?? {});
      const configKeys = (n: string) => Object.keys((find(objects, 'ConfigMap', n)?.data as Record<string, string> | undefined) ?? {});
      for (const { object } of objects) {
        const pod = podTemplateOf(object);
        if (!pod) continue;
        const at = `${name}: ${object.kind}/${object.metadata.name}`;
        if (pod.spec.serviceAccountName && !has('ServiceAccount', pod.spec.serviceAccountName))
          problems.push(`${at}: ServiceAccount ${pod.spec.serviceAccountName}`);
        const statefulService = (object.spec as { serviceName?: string }).serviceName;
        if (statefulService && !has('Service', statefulService)) problems.push(`${at}: Service ${statefulService}`);
        for (const v of pod.spec.volumes ?? []) {
          if (v.secret && !has('Secret', v.secret.secretName)) problems.push(`${at}: Secret ${v.secret.secretName}`);
          if (v.configMap && !has('ConfigMap', v.configMap.name)) problems.push(`${at}: ConfigMap ${v.configMap.name}`);
        }
        for (const c of containersOf(object)) {
          for (const from of c.envFrom ?? []) {
            if (from.secretRef && !has('Secret', from.secretRef.name)) problems.push(`${at} ${c.name}: Secret ${from.secretRef.name}`);
            if (from.configMapRef && !has('ConfigMap', from.configMapRef.name)) problems.push(`${at} ${c.name}: ConfigMap ${from.configMapRef.name}`);
          }
          for (const e of c.env ?? []) {
            const s = e.valueFrom?.secretKeyRef;
            if (s && !secretKeys(s.name).includes(s.key)) problems.push(`${at} ${c.name}: Secret ${s.name} key ${s.key}`);
            const m = e.valueFrom?.configMapKeyRef;
            if (m && !configKeys(m.name).includes(m.key)) problems.push(`${at} ${c.name}: ConfigMap ${m.name} key ${m.key}`);
          }
          // Kubernetes expands $(VAR) in command and args from the container's env; an
          // undefined one stays as the literal text.
          const defined = new Set((c.env ?? []).map((e) => e.name));
          for (const word of [...(c.command ?? []), ...(c.args ?? [])]) {
            for (const m of word.matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g))
              if (!defined.has(m[1]!)) problems.push(`${at} ${c.name}: $(${m[1]}) is not in its env`);
          }
          for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe]) {
            const port = probe?.httpGet?.port ?? probe?.tcpSocket?.port;
            if (typeof port === 'string' && !c.ports?.some((p) => p.name === port)) problems.push(`${at} ${c.name}: a probe names port ${port}`);
          }
        }
      }
      assert.deepEqual(problems, [], `${name}: names that do not exist`);
    }
  });

  it('Services, the PodDisruptionBudget, the HPA and the NetworkPolicies select the pods they are meant for', () => {
    for (const { name, objects } of renderings) {
      const pods = objects.flatMap(({ object }) => (podTemplateOf(object) ? [{ object, template: podTemplateOf(object)! }] : []));
      const selected = (selector: Record<string, string> | undefined) => pods.filter((p) => selects(selector, p.template.metadata.labels));
      type Selector = { matchLabels?: Record<string, string> };
      for (const { object } of objects) {
        const spec = (object.spec ?? {}) as {
          selector?: Selector & Record<string, string>;
          ports?: Array<{ targetPort?: string | number }>;
          scaleTargetRef?: { kind: string; name: string };
          podSelector?: Selector;
          ingress?: Array<{ from?: Array<{ podSelector?: Selector }> }>;
        };
        const at = `${name}: ${object.kind}/${object.metadata.name}`;
        if (object.kind === 'Service') {
          const targets = selected(spec.selector);
          assert.equal(targets.length, 1, `${at} selects ${targets.length} workloads`);
          for (const port of spec.ports ?? []) {
            const containers = targets[0]!.template.spec.containers;
            assert.ok(
              containers.some((c) => c.ports?.some((p) => p.name === port.targetPort || p.containerPort === port.targetPort)),
              `${at}: targetPort ${port.targetPort} is no container's port`,
            );
          }
        }
        if (podTemplateOf(object))
          assert.ok(selects(spec.selector?.matchLabels, podTemplateOf(object)!.metadata.labels), `${at}: its selector does not match its own pods`);
        if (object.kind === 'PodDisruptionBudget')
          assert.deepEqual(
            selected(spec.selector?.matchLabels).map((p) => p.object.metadata.name),
            ['sbx-gateway'],
            at,
          );
        if (object.kind === 'HorizontalPodAutoscaler') {
          const target = spec.scaleTargetRef;
          assert.ok(target && find(objects, target.kind, target.name), `${at}: scales ${target?.kind}/${target?.name}, which does not exist`);
        }
        if (object.kind === 'NetworkPolicy') {
          const podSelector = spec.podSelector?.matchLabels;
          if (podSelector) assert.equal(selected(podSelector).length, 1, `${at} applies to no workload`);
          for (const rule of spec.ingress ?? []) {
            for (const peer of rule.from ?? [])
              if (peer.podSelector) assert.equal(selected(peer.podSelector.matchLabels).length, 1, `${at}: a peer selects no workload`);
          }
        }
      }
    }
  });

  it('the node DaemonSet: labelled KVM hosts, privileged, /dev/kvm and /dev/net/tun, host paths, /healthz probes, a preStop that drains, a grace period above the longest session', () => {
    assert.deepEqual(nodePod.nodeSelector, { 'sandbox.dev/kvm': 'true' });
    assert.equal(nodePod.hostNetwork, true);
    assert.equal(nodePod.hostPID, true);
    assert.equal(nodePod.automountServiceAccountToken, false);
    assert.equal(agent.securityContext?.privileged, true);
    const hostPaths = new Map((nodePod.volumes ?? []).filter((v) => v.hostPath).map((v) => [v.name, v.hostPath!]));
    const mountedAt = (hostPath: string) => {
      const volume = [...hostPaths].find(([, h]) => h.path === hostPath)?.[0];
      return agent.volumeMounts?.find((m) => m.name === volume);
    };
    for (const device of ['/dev/kvm', '/dev/net/tun']) {
      assert.equal([...hostPaths.values()].find((h) => h.path === device)?.type, 'CharDevice', `${device} as a CharDevice host path`);
      assert.equal(mountedAt(device)?.mountPath, device);
    }
    for (const dir of ['/var/lib/sandboxes', '/run']) {
      assert.equal(mountedAt(dir)?.mountPath, dir, `${dir} from the host`);
      assert.equal(mountedAt(dir)?.mountPropagation, 'Bidirectional', `${dir}: mounts made there outlive the pod`);
    }
    assert.equal(mountedAt('/sys/fs/cgroup')?.mountPath, '/sys/fs/cgroup');
    const config = only('ConfigMap', 'sbx-node').data as Record<string, string>;
    assert.ok(config.SBX_IMAGES_DIR?.startsWith(`${config.SBX_STATE_DIR}/`), "the images are under the state dir's host path");
    assert.deepEqual(
      agent.envFrom?.map((f) => f.configMapRef?.name),
      ['sbx-sessions', 'sbx-node'],
    );

    // The agent's command line: advertised at the host's address, named after the host.
    const args = agent.args ?? [];
    const flag = (name: string) => args[args.indexOf(name) + 1];
    assert.equal(flag('--advertise'), `http://$(NODE_IP):${flag('--port')}`);
    assert.equal(flag('--name'), '$(NODE_NAME)');
    assert.equal(envOf(agent, 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
    assert.equal(envOf(agent, 'NODE_IP')?.valueFrom?.fieldRef?.fieldPath, 'status.hostIP');
    const port = agent.ports?.find((p) => p.name === 'http');
    assert.equal(String(port?.containerPort), flag('--port'));
    for (const probe of [agent.readinessProbe, agent.livenessProbe, agent.startupProbe]) {
      assert.deepEqual(
        probe?.httpGet,
        { path: '/healthz', port: 'http' },
        'a bare GET /healthz is the one request a node answers without the cluster credential',
      );
    }
    assert.ok(agent.resources?.requests?.cpu && agent.resources.requests.memory && agent.resources.limits?.memory);

    // preStop: drains this host, then waits at most the longest session lifetime; the pod's
    // grace period covers that wait.
    const preStop = shellScriptOf(agent.lifecycle?.preStop?.exec?.command);
    assert.ok(preStop, 'a preStop shell hook');
    const drains = sbxInScript(preStop, 'preStop').map((i) => i.words);
    assert.deepEqual(drains[0]?.slice(0, 3), ['node', 'drain', '$NODE_NAME']);
    assert.match(preStop, /\$\{SBX_MAX_LIFETIME_SECONDS:-3600\}/);
    const lifetime = Number((only('ConfigMap', 'sbx-sessions').data as Record<string, string>).SBX_MAX_LIFETIME_SECONDS);
    assert.ok(lifetime >= 60, 'SBX_MAX_LIFETIME_SECONDS in the ConfigMap sbx-sessions');
    assert.ok(
      (nodePod.terminationGracePeriodSeconds ?? 30) >= lifetime + 60,
      `terminationGracePeriodSeconds ${nodePod.terminationGracePeriodSeconds} < ${lifetime} + 60`,
    );
    // ... and the next pod undoes the drain before the agent starts.
    const undrain = nodePod.initContainers
      ?.flatMap((c) => sbxInvocationsOf({ ...node, spec: { template: { metadata: {}, spec: { containers: [c] } } } } as unknown as K8sObject))
      .map((i) => i.words.slice(0, 3));
    assert.deepEqual(
      undrain?.find((w) => w[1] === 'undrain'),
      ['node', 'undrain', '$NODE_NAME'],
    );
  });

  it('the gateway: non-root, read-only root, no privileges, spread out, 2 to 10 replicas (HPA on CPU), PDB minAvailable 1, ready only while /healthz is', () => {
    const pod = gatewayPod;
    const sc = gatewayContainer.securityContext ?? {};
    assert.equal(pod.securityContext?.runAsNonRoot, true);
    assert.ok(Number(pod.securityContext?.runAsUser) > 0);
    assert.deepEqual(pod.securityContext?.seccompProfile, { type: 'RuntimeDefault' });
    assert.equal(sc.readOnlyRootFilesystem, true);
    assert.equal(sc.allowPrivilegeEscalation, false);
    assert.notEqual(sc.privileged, true);
    assert.deepEqual(sc.capabilities, { drop: ['ALL'] });
    assert.ok(!pod.hostNetwork && !pod.hostPID && !(pod.volumes ?? []).some((v) => v.hostPath), 'nothing of the host');
    assert.equal(pod.automountServiceAccountToken, false);
    assert.deepEqual(gatewayContainer.readinessProbe?.httpGet, { path: '/healthz', port: 'http' });
    assert.ok(gatewayContainer.livenessProbe?.tcpSocket, 'liveness does not depend on the database (an outage must not restart every gateway)');
    const spread = podTemplateOf(gateway)!.spec as PodSpec & { topologySpreadConstraints?: Array<{ topologyKey: string }> };
    assert.ok(spread.topologySpreadConstraints?.some((t) => t.topologyKey === 'kubernetes.io/hostname'));
    assert.ok(gatewayContainer.resources?.requests?.cpu, 'the HPA measures CPU against the request');

    const hpa = only('HorizontalPodAutoscaler', 'sbx-gateway').spec as {
      minReplicas: number;
      maxReplicas: number;
      metrics: Array<{ resource?: { name: string } }>;
    };
    assert.ok(hpa.minReplicas >= 2 && hpa.maxReplicas > hpa.minReplicas);
    assert.equal(hpa.metrics[0]?.resource?.name, 'cpu');
    const replicas = (gateway.spec as { replicas?: number }).replicas;
    assert.ok(replicas === undefined, 'the HPA owns the replica count (a fixed one would be put back by every apply)');
    assert.equal((only('PodDisruptionBudget', 'sbx-gateway').spec as { minAvailable: number }).minAvailable, 1);
    for (const sa of ['sbx-node', 'sbx-gateway']) assert.equal(only('ServiceAccount', sa).automountServiceAccountToken, false, `${sa}: no API token`);
  });

  it('a session\'s size is set once, for the nodes and the gateways alike (docs/configuration.md: "give gateways the same ... as the nodes")', () => {
    const configuration = readFileSync(path.join(ROOT, 'docs', 'configuration.md'), 'utf8');
    const sentence = /give gateways the same([\s\S]*?)as the nodes/.exec(configuration)?.[1] ?? '';
    const shared = [...sentence.matchAll(/`(SBX_[A-Z0-9_]+)`/g)].map((m) => m[1]!);
    assert.ok(shared.includes('SBX_MEMORY_MIB') && shared.length >= 5, `read from docs/configuration.md: ${shared.join(' ')}`);
    const sessions = only('ConfigMap', 'sbx-sessions').data as Record<string, string>;
    for (const name of shared) assert.ok(name in sessions, `${name} in the ConfigMap sbx-sessions`);
    for (const [where, container] of [
      ['node', agent],
      ['gateway', gatewayContainer],
    ] as const) {
      assert.ok(
        container.envFrom?.some((f) => f.configMapRef?.name === 'sbx-sessions'),
        `${where} reads sbx-sessions`,
      );
      // Set anywhere else, a value could differ between the two: placement would then count
      // sessions at another size than the nodes give them.
      for (const from of container.envFrom ?? []) {
        const other =
          from.configMapRef && from.configMapRef.name !== 'sbx-sessions' ? (only('ConfigMap', from.configMapRef.name).data as Record<string, string>) : {};
        for (const name of shared) assert.ok(!(name in other), `${name} in ConfigMap ${from.configMapRef?.name} too`);
      }
      for (const e of container.env ?? []) assert.ok(!shared.includes(e.name), `${where}: ${e.name} set in its env`);
    }
  });

  it('the database URL and the cluster credential: one Secret, read as environment variables by the agent, its undrain step and the gateway only; never a flag, a file or a ConfigMap', () => {
    for (const { name, objects } of renderings) {
      const readers: string[] = [];
      for (const { object } of objects) {
        if (object.kind === 'ConfigMap') {
          for (const [key, value] of Object.entries((object.data ?? {}) as Record<string, string>)) {
            assert.doesNotMatch(
              `${key}=${value}`,
              /postgres(ql)?:\/\/|SBX_CLUSTER_DB_URL|SBX_CLUSTER_SECRET|PASSWORD/i,
              `${name}: ConfigMap/${object.metadata.name} holds a secret`,
            );
          }
        }
        const pod = podTemplateOf(object);
        for (const v of pod?.spec.volumes ?? [])
          assert.notEqual(v.secret?.secretName, 'sbx-cluster', `${name}: sbx-cluster mounted as files in ${object.metadata.name}`);
        for (const c of containersOf(object)) {
          assert.ok(!(c.envFrom ?? []).some((f) => f.secretRef?.name === 'sbx-cluster'), `${object.metadata.name}/${c.name}: take only the keys it needs`);
          const keys = (c.env ?? []).filter((e) => e.valueFrom?.secretKeyRef?.name === 'sbx-cluster').map((e) => `${e.name}=${e.valueFrom!.secretKeyRef!.key}`);
          if (keys.length > 0) readers.push(`${object.metadata.name}/${c.name}: ${keys.join(' ')}`);
          for (const word of [...(c.command ?? []), ...(c.args ?? [])])
            assert.doesNotMatch(
              word,
              /\$\(SBX_CLUSTER_(DB_URL|SECRET)\)/,
              `${c.name}: a secret in a process's arguments is readable by every user of the host`,
            );
        }
      }
      assert.deepEqual(
        readers.sort(),
        [
          'sbx-gateway/gateway: SBX_CLUSTER_DB_URL=SBX_CLUSTER_DB_URL SBX_CLUSTER_SECRET=SBX_CLUSTER_SECRET',
          'sbx-node/node: SBX_CLUSTER_DB_URL=SBX_CLUSTER_DB_URL SBX_CLUSTER_SECRET=SBX_CLUSTER_SECRET',
          'sbx-node/undrain: SBX_CLUSTER_DB_URL=SBX_CLUSTER_DB_URL',
        ],
        `${name}: who reads the cluster's secrets`,
      );
    }
    // The preStop hands the credential to curl on its standard input, not its arguments, and
    // no sbx command line names either secret (the commands read them from the environment).
    assert.doesNotMatch(shellScriptOf(agent.lifecycle?.preStop?.exec?.command) ?? '', /curl[^|\n]*SBX_CLUSTER_SECRET/);
    for (const { where, words } of renderings[1]!.objects.flatMap(({ object }) => sbxInvocationsOf(object))) {
      assert.doesNotMatch(words.join(' '), /SBX_CLUSTER_(DB_URL|SECRET)/, `${where}: sbx ${words.join(' ')}`);
    }
  });

  it('every sbx command line of the containers and their hooks uses the agreed CLI surface', () => {
    const invocations = renderings[1]!.objects.flatMap(({ object }) => sbxInvocationsOf(object));
    assert.deepEqual([...new Set(invocations.map((i) => (parseInvocation(i.words) as { path?: string }).path))].sort(), [
      'gateway',
      'image build',
      'node',
      'node drain',
      'node undrain',
    ]);
    assert.deepEqual(surfaceProblems(invocations), []);
  });

  it('the built CLI (dist/) has every command and option the manifests use, and reads the database URL from SBX_CLUSTER_DB_URL where they rely on it', async (t) => {
    const main = path.join(ROOT, 'dist', 'cli', 'main.js');
    if (!existsSync(main)) return t.skip('dist/cli/main.js is not built (npm run build)');
    // A command's own help, or undefined (commander answers an unknown one with the top help).
    const helps = new Map<string, Promise<string | undefined>>();
    const help = (words: string[]) => {
      const key = words.join(' ');
      if (!helps.has(key)) {
        const res = run([process.execPath, main, ...words, '--help'], { allowFailure: true, timeoutMs: 30_000 });
        helps.set(
          key,
          res.then((r) => (r.exitCode === 0 && r.stdout.startsWith(`Usage: sbx ${key} `) ? r.stdout : undefined)),
        );
      }
      return helps.get(key) as Promise<string | undefined>;
    };
    /** An option's help entry, wrapped lines joined. */
    const entry = (text: string, option: string) => {
      const found = new RegExp(`^ +(-\\w, )?${option}\\b`, 'm').exec(text);
      if (!found) return undefined;
      const from = found.index + found[0].length;
      const next = text.slice(from).search(/^ +-/m);
      return text.slice(found.index, next === -1 ? undefined : from + next).replace(/\s+/g, ' ');
    };
    // The manifests pass the database URL as SBX_CLUSTER_DB_URL only (a flag would show in
    // /proc/<pid>/cmdline): each of these must read its option from there.
    const urlFromEnv: Record<string, string> = { node: '--cluster', 'node drain': '--db', 'node undrain': '--db', gateway: '--db' };
    const problems: string[] = [];
    for (const { where, words } of renderings[1]!.objects.flatMap(({ object }) => sbxInvocationsOf(object))) {
      const parsed = parseInvocation(words);
      if ('problem' in parsed) continue; // the test above reports it
      const text = await help(parsed.path.split(' '));
      if (text === undefined) {
        problems.push(`${where}: \`sbx ${parsed.path} --help\` fails`);
        continue;
      }
      for (const option of parsed.options) if (entry(text, option) === undefined) problems.push(`${where}: sbx ${parsed.path} has no ${option}`);
      const envOption = urlFromEnv[parsed.path];
      if (envOption && !parsed.options.includes(envOption) && !entry(text, envOption)?.includes('(env: SBX_CLUSTER_DB_URL)')) {
        problems.push(`${where}: sbx ${parsed.path} does not read ${envOption} from SBX_CLUSTER_DB_URL`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('the shell hooks pass shellcheck and use shell variables (Kubernetes does not expand $(VAR) in them)', async (t) => {
    const scripts: Array<{ where: string; script: string }> = [];
    for (const { object } of renderings[1]!.objects) {
      for (const c of containersOf(object)) {
        const own = shellScriptOf(c.command);
        if (own) scripts.push({ where: `${object.metadata.name}/${c.name}`, script: own });
        const hook = shellScriptOf(c.lifecycle?.preStop?.exec?.command);
        if (hook) scripts.push({ where: `${object.metadata.name}/${c.name} preStop`, script: hook });
      }
    }
    assert.equal(scripts.length, 2);
    for (const { where, script } of scripts) {
      assert.doesNotMatch(script, /\$\([A-Z_][A-Z0-9_]*\)/, `${where}: $(VAR) in a shell script is a command substitution, not the variable`);
    }
    const version = await run(['shellcheck', '--version'], { allowFailure: true }).catch(() => undefined);
    if (version?.exitCode !== 0) return t.skip('shellcheck is not installed');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-k8s-hooks-'));
    try {
      for (const [i, { where, script }] of scripts.entries()) {
        const file = path.join(dir, `hook-${i}.sh`);
        writeFileSync(file, `#!/bin/sh\n${script}\n`);
        const res = await run(['shellcheck', '-s', 'sh', file], { allowFailure: true });
        assert.equal(res.exitCode, 0, `${where}:\n${res.stdout}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('kubectl kustomize renders the same objects, object for object, which pass the schemas (skipped without kubectl)', async (t) => {
    const version = await run(['kubectl', 'version', '--client'], { allowFailure: true }).catch(() => undefined);
    if (version?.exitCode !== 0) return t.skip('kubectl is not installed');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-kustomize-'));
    try {
      cpSync(DEPLOY, dir, { recursive: true });
      // The operator's env files, from the examples.
      copyFileSync(path.join(dir, 'base', 'cluster.env.example'), path.join(dir, 'base', 'cluster.env'));
      copyFileSync(path.join(dir, 'try-it', 'postgres.env.example'), path.join(dir, 'try-it', 'postgres.env'));
      for (const [name, sub, mine] of [
        ['base', '', renderings[0]!],
        ['try-it', 'try-it', renderings[1]!],
      ] as const) {
        const res = await run(['kubectl', 'kustomize', path.join(dir, sub)], { allowFailure: true, timeoutMs: 60_000 });
        assert.equal(res.exitCode, 0, res.stderr);
        const out = path.join(dir, `${name}.rendered.yaml`);
        writeFileSync(out, res.stdout);
        const theirs = loadYamlFile(out);
        const ids = (objects: K8sObject[]) => objects.map((o) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`).sort();
        assert.deepEqual(ids(theirs), ids(mine.objects.map((l) => l.object)), `${name}: kubectl kustomize and the test's rendering differ`);
        for (const object of theirs) {
          // kustomize folds a long base64 value over lines; the API server's decoder skips
          // the newlines, the schema's "byte" format does not.
          if (object.kind === 'Secret')
            for (const [k, v] of Object.entries(object.data as Record<string, string>)) (object.data as Record<string, string>)[k] = v.replace(/\n/g, '');
          assert.equal(schemaProblem(object), undefined, `${name}: ${object.kind}/${object.metadata.name}`);
          // Object for object what the other tests read: they check what kubectl would apply.
          assert.deepEqual(
            find(mine.objects, object.kind, object.metadata.name),
            object,
            `${name}: ${object.kind}/${object.metadata.name} differs from kubectl kustomize's`,
          );
        }
      }
      // Without the operator's cluster.env, nothing renders.
      rmSync(path.join(dir, 'base', 'cluster.env'));
      const missing = await run(['kubectl', 'kustomize', dir], { allowFailure: true, timeoutMs: 60_000 });
      assert.notEqual(missing.exitCode, 0);
      assert.match(missing.stderr, /cluster\.env/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
