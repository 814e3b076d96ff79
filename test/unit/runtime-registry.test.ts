/**
 * Runtimes are registered as entries (issue 23): one entry per runtime in its own folder, one
 * line in src/runtimes/registered.ts, and everything else (settings, SBX_RUNTIME, `auto`, the
 * API's enum, the client's type, the ledger's reclaim, a gateway's vCPUs) follows from the
 * registry. No root, no sandbox.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { sessionSchema } from '../../src/api/schemas.js';
import type { RuntimeName as ClientRuntimeName } from '../../src/client/runtime-names.js';
import { ResourceNames } from '../../src/network/names.js';
import { RUNTIMES, type RuntimeName } from '../../src/runtimes/registered.js';
import { RuntimeRegistry } from '../../src/runtimes/registry.js';
import { RECLAIM_ORDER } from '../../src/sessions/resource-ledger.js';
import { toyRuntime } from '../helpers/toy-runtime.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

// The client's type is the registry's, or this file does not type-check.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const CLIENT_TYPE_MATCHES: Same<ClientRuntimeName, RuntimeName> = true;

describe('the runtime registry', () => {
  it('registers container, qemu and firecracker; auto prefers firecracker, then qemu, then the container', () => {
    assert.deepEqual(RUNTIMES.names, ['container', 'qemu', 'firecracker']);
    assert.deepEqual(RUNTIMES.choices, ['auto', 'container', 'qemu', 'firecracker']);
    assert.deepEqual(RUNTIMES.autoOrder, ['firecracker', 'qemu', 'container']);
  });

  it("the API's runtime enum and the client's type are the registered names", () => {
    assert.deepEqual(sessionSchema.properties.runtime.enum, RUNTIMES.names);
    assert.ok(CLIENT_TYPE_MATCHES);
    // The type check above only runs with tsc; the file itself is read here on every run.
    const union = /export type RuntimeName = ([^;]+);/.exec(readFileSync(path.join(ROOT, 'src/client/runtime-names.ts'), 'utf8'))?.[1];
    const clientNames = [...(union ?? '').matchAll(/'([^']+)'/g)].map((m) => m[1]);
    assert.deepEqual(clientNames.sort(), [...RUNTIMES.names].sort(), 'src/client/runtime-names.ts must list the names of src/runtimes/registered.ts');
  });

  it('reclaims in the order of old: processes, runtime state, mounts, files, cgroups, network, keys, leases', () => {
    assert.deepEqual(RECLAIM_ORDER, [
      'process',
      'container',
      'mount',
      'disk',
      'volume-owner',
      'jail',
      'cgroup',
      'netns',
      'veth',
      'key-dir',
      'id-range',
      'vm-user',
    ]);
  });

  it('takes a toy entry: its name, settings, vCPUs, auto rank, creation and resource kind', async () => {
    const registry = new RuntimeRegistry([...RUNTIMES.entries, toyRuntime]);
    assert.deepEqual(registry.names, ['container', 'qemu', 'firecracker', 'toy']);
    assert.deepEqual(registry.autoOrder, ['toy', 'firecracker', 'qemu', 'container']);
    const settings = registry.settingsFromEnv({ SBX_TOY_VCPUS: '5' });
    assert.deepEqual(settings.toy, { vcpus: 5 });
    assert.equal(registry.vcpusByRuntime(settings).toy, 5);
    const asked = await registry.select('toy', new ResourceNames('tst-'), settings);
    assert.equal(asked.runtime.name, 'toy');
    assert.equal(asked.reason, 'requested with --runtime toy; toy (5 vCPUs of nothing)');
    const auto = await registry.select('auto', new ResourceNames('tst-'), settings);
    assert.equal(auto.runtime.name, 'toy', auto.reason);
    assert.equal(registry.resourceKind('toy-file'), toyRuntime.resources['toy-file']);
  });

  it('refuses a second entry of one name, the name auto, and a second reclaimer of a shared kind', () => {
    assert.throws(() => new RuntimeRegistry([toyRuntime, toyRuntime]), /runtime toy is registered twice/);
    assert.throws(() => new RuntimeRegistry([{ ...toyRuntime, name: 'auto' }]), /must match .* and not be "auto"/);
    assert.throws(() => new RuntimeRegistry([{ ...toyRuntime, name: 'Toy Box' }]), /must match/);
    const rival = { ...toyRuntime, name: 'rival', resources: { process: { stage: 'processes', reclaim: async () => undefined } } } as const;
    assert.throws(() => new RuntimeRegistry([...RUNTIMES.entries, rival]), /resource kind process of runtime rival has another reclaimer already/);
  });

  it('says what each runtime passed over when auto finds none', async () => {
    const broken = { ...toyRuntime, name: 'broken', probe: async () => 'no such hardware' } as const;
    const failing = { ...toyRuntime, name: 'failing', create: () => Promise.reject(new Error('cannot start')) } as const;
    const registry = new RuntimeRegistry([broken, failing]);
    await assert.rejects(registry.select('auto', new ResourceNames('tst-'), registry.settingsFromEnv({})), (err: Error) => {
      assert.equal(err.message, 'runtime auto is not available here: none of broken, failing can run here (broken: no such hardware; failing: cannot start)');
      return true;
    });
  });

  it('one line in registered.ts is all the service needs: settings, SBX_RUNTIME, the API enum, the ledger, a gateway', () => {
    // The registration line is added as the module loads (a loader hook), to the real file.
    const toy = pathToFileURL(path.join(ROOT, 'test/helpers/toy-runtime.ts')).href;
    const loader = `export async function load(url, context, next) {
      const loaded = await next(url, context);
      if (!url.endsWith('/src/runtimes/registered.ts')) return loaded;
      const source = 'import { toyRuntime } from ${JSON.stringify(toy)};\\n' + String(loaded.source).replace('new RuntimeRegistry([', 'new RuntimeRegistry([toyRuntime, ');
      return { ...loaded, source };
    }`;
    const hook = `import { register } from 'node:module'; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(loader)}`)});`;
    const script = `
      import { mkdtempSync, writeFileSync, existsSync } from 'node:fs';
      import os from 'node:os';
      import path from 'node:path';
      import pino from 'pino';
      const { sessionSchema } = await import('./src/api/schemas.ts');
      const { runtimeSettingsFromEnv } = await import('./src/runtimes/settings.ts');
      const { reclaimRecorded } = await import('./src/sessions/resource-ledger.ts');
      const { gatewaySettingsFromEnv } = await import('./src/cluster/gateway/settings.ts');
      const settings = runtimeSettingsFromEnv({ SBX_RUNTIME: 'toy', SBX_TOY_VCPUS: '7' });
      const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'toy-')), 'left-behind');
      writeFileSync(file, 'x');
      const complete = await reclaimRecorded([{ kind: 'toy-file', name: file }], pino({ level: 'silent' }));
      console.log(JSON.stringify({
        apiEnum: sessionSchema.properties.runtime.enum,
        runtime: settings.runtime,
        toySettings: settings.runtimes.toy,
        reclaimed: complete && !existsSync(file),
        gatewayVcpus: gatewaySettingsFromEnv({ SBX_TOY_VCPUS: '7' }).vcpus.toy,
      }));`;
    const child = spawnSync(
      process.execPath,
      ['--import', 'tsx', '--import', `data:text/javascript,${encodeURIComponent(hook)}`, '--input-type=module', '--eval', script],
      {
        cwd: ROOT,
        encoding: 'utf8',
        timeout: 60_000,
      },
    );
    assert.equal(child.status, 0, child.stderr);
    assert.deepEqual(JSON.parse(child.stdout.trim().split('\n').at(-1) as string), {
      apiEnum: ['toy', 'container', 'qemu', 'firecracker'],
      runtime: 'toy',
      toySettings: { vcpus: 7 },
      reclaimed: true,
      gatewayVcpus: 7,
    });
  });
});
