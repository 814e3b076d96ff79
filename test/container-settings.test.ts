import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { containerSettingsFromEnv, ID_RANGE_SIZE, SETUP_CRIU } from '../src/runtimes/container/settings.js';
import { ResourceNames } from '../src/network/names.js';
import { ContainerRuntime } from '../src/runtimes/container/container-runtime.js';
import { idmappedMountsUnavailable } from '../src/runtimes/container/idmapped-mount.js';
import { SessionStore } from '../src/sessions/store.js';
import { startTestOrchestrator, TEST_PREFIX } from './helpers/orchestrator.js';

describe('container settings', () => {
  it('have defaults, and bad values are refused naming the variable', () => {
    assert.deepEqual(containerSettingsFromEnv({}), {
      idLeaseDir: '/run/sbx-id-ranges',
      cpus: 1,
      ioBytesPerSecond: 100 * 1024 * 1024,
      ioOpsPerSecond: 2000,
      inotifyInstances: 128,
      inotifyWatches: 16384,
      diskMiB: 4096,
      runcBin: 'runc',
      // The one setup unpacked (scripts/setup-criu.sh), else the one on PATH.
      criuBin: existsSync(SETUP_CRIU) ? SETUP_CRIU : 'criu',
      transport: 'tcp',
    });
    assert.equal(containerSettingsFromEnv({ SBX_CRIU: '/opt/criu' }).criuBin, '/opt/criu');
    assert.equal(containerSettingsFromEnv({ SBX_DISK_MIB: '64', RUNC_BIN: '/opt/runc' }).diskMiB, 64);
    assert.equal(containerSettingsFromEnv({ RUNC_BIN: '/opt/runc' }).runcBin, '/opt/runc');
    assert.throws(() => containerSettingsFromEnv({ SBX_DISK_MIB: '63' }), /SBX_DISK_MIB must be between 64 and 1048576/);
    assert.equal(containerSettingsFromEnv({ SBX_CPUS: '0.5' }).cpus, 0.5);
    assert.equal(containerSettingsFromEnv({ SBX_IO_BPS: '0' }).ioBytesPerSecond, 0);
    assert.throws(() => containerSettingsFromEnv({ SBX_CPUS: 'lots' }), /SBX_CPUS/);
    assert.throws(() => containerSettingsFromEnv({ SBX_CPUS: '0' }), /SBX_CPUS/);
    assert.equal(containerSettingsFromEnv({ SBX_CONTAINER_UID_BASE: '300000' }).uidBase, 300_000);
    assert.throws(() => containerSettingsFromEnv({ SBX_CONTAINER_UID_BASE: '1000' }), /SBX_CONTAINER_UID_BASE/);
    assert.throws(() => containerSettingsFromEnv({ SBX_CONTAINER_UID_BASE: String(2 ** 32 - 10) }), /SBX_CONTAINER_UID_BASE/);
    assert.throws(() => containerSettingsFromEnv({ SBX_IO_IOPS: '-1' }), /SBX_IO_IOPS/);
    assert.throws(() => containerSettingsFromEnv({ SBX_INOTIFY_WATCHES: '0' }), /SBX_INOTIFY_WATCHES/);
  });
});

describe('the container runtime on an older kernel', () => {
  it('is refused with the reason: overlayfs over idmapped mounts needs Linux 5.19', () => {
    assert.match(idmappedMountsUnavailable('5.10.0-28-amd64') ?? '', /Linux >= 5\.19.*5\.10\.0-28-amd64/);
    assert.match(idmappedMountsUnavailable('4.19.0') ?? '', /5\.19/);
    assert.equal(idmappedMountsUnavailable('5.19.0'), undefined);
    assert.equal(idmappedMountsUnavailable('6.1.0-18-amd64'), undefined);
  });
});

describe('host id ranges on the ledger', () => {
  let dir: string;
  let store: SessionStore;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-ids-'));
    store = new SessionStore(path.join(dir, 'orchestrator.db'));
  });
  after(async () => {
    store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('are leased lowest first, one per session, kept by the session, and freed with its ledger', () => {
    const base = 200_000;
    const a = store.leaseIdRange('aaaaaaaaaa', base, ID_RANGE_SIZE, 3);
    const b = store.leaseIdRange('bbbbbbbbbb', base, ID_RANGE_SIZE, 3);
    assert.equal(a, base);
    assert.equal(b, base + ID_RANGE_SIZE);
    assert.equal(store.leaseIdRange('aaaaaaaaaa', base, ID_RANGE_SIZE, 3), a, 'a session keeps its range (adoption, a claimed warm sandbox)');
    assert.deepEqual(store.resourcesOf('aaaaaaaaaa'), [{ kind: 'id-range', name: `${base}:${ID_RANGE_SIZE}` }]);
    store.leaseIdRange('cccccccccc', base, ID_RANGE_SIZE, 3);
    assert.throws(() => store.leaseIdRange('dddddddddd', base, ID_RANGE_SIZE, 3), /all 3 host id ranges from 200000 are held/);
    // Released (its ledger forgotten): the lowest range is free again.
    store.forgetResources('aaaaaaaaaa');
    assert.equal(store.leaseIdRange('dddddddddd', base, ID_RANGE_SIZE, 3), base);
  });

  it('survive a restart: a reopened store hands out none that is held', async () => {
    store.close();
    store = new SessionStore(path.join(dir, 'orchestrator.db'));
    assert.throws(() => store.leaseIdRange('eeeeeeeeee', 200_000, ID_RANGE_SIZE, 3), /held/);
  });
});

describe('the multi-tenant warning', () => {
  async function startupLog(overrides: { host: string }): Promise<Array<{ level: number; msg: string }>> {
    const lines: Array<{ level: number; msg: string }> = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as { level: number; msg: string });
        done();
      },
    });
    const names = new ResourceNames(TEST_PREFIX);
    // `auto` fell back to containers (as the registry's auto does where no VM runtime can run).
    const orch = await startTestOrchestrator(
      { runtime: 'auto', ...overrides },
      false,
      { runtime: new ContainerRuntime(names, containerSettingsFromEnv(process.env)), reason: 'auto: no VM runtime' },
      pino({ level: 'info' }, sink),
    );
    await orch.stop();
    return lines;
  }

  it('is said at start, at warn level, when API keys exist and auto fell back to containers', async () => {
    // A non-loopback address: the test helper makes an API key first (multi-tenant mode).
    const lines = await startupLog({ host: '0.0.0.0' });
    const warning = lines.find((l) => /MULTI-TENANT WITH CONTAINERS/.test(l.msg));
    assert.ok(warning, 'the warning is logged');
    assert.equal(warning.level, 40, 'at warn level');
    assert.match(warning.msg, /only isolation between tenants/);
    assert.match(warning.msg, /kernel/);
  });

  it('is not said without API keys (one local user)', async () => {
    const lines = await startupLog({ host: '127.0.0.1' });
    assert.ok(!lines.some((l) => /MULTI-TENANT/.test(l.msg)));
    assert.ok(
      lines.some((l) => /host inotify limit/.test(l.msg)),
      'the host inotify limits are logged at start',
    );
  });
});
