import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { FirecrackerClient } from '../src/runtimes/firecracker/api/client.js';
import { findOnPath, kvmUnavailable } from '../src/runtimes/firecracker/host/host-check.js';
import { FirecrackerApiError, FirecrackerTransportError } from '../src/runtimes/firecracker/api/errors.js';
import type { MachineConfiguration } from '../src/runtimes/firecracker/api/types.js';
import { waitForApiSocket } from '../src/runtimes/firecracker/api/wait-for-socket.js';
import { bootSteps } from '../src/runtimes/firecracker/boot/boot-steps.js';
import { guestCidForLease, macFromIPv4 } from '../src/runtimes/firecracker/boot/guest-identity.js';
import { DEFAULT_BOOT_ARGS, KERNEL_CMDLINE_MAX_BYTES } from '../src/runtimes/firecracker/boot/kernel-args.js';
import { snapshotCreateSteps, snapshotRestoreSteps } from '../src/runtimes/firecracker/boot/snapshot-steps.js';
import { runSteps, VmStepError } from '../src/runtimes/firecracker/boot/steps.js';
import type { FirecrackerVmSpec } from '../src/runtimes/firecracker/boot/vm-spec.js';
import { chrootLayout } from '../src/runtimes/firecracker/jailer/chroot-layout.js';
import { jailId } from '../src/runtimes/firecracker/jailer/jail-id.js';
import { jailerArgv, type JailerOptions } from '../src/runtimes/firecracker/jailer/jailer-args.js';
import { KeyRotationError, GUEST_KEY_PATHS, rotateKeysAfterRestore, type RotationPhase } from '../src/runtimes/firecracker/ssh-keys/key-rotation.js';
import { COLD_BOOT_CALLS } from './helpers/firecracker/calls.js';
import { FirecrackerContractServer } from './helpers/firecracker/contract-server.js';
import { fakeKeys, FakeRekeyGuest } from './helpers/firecracker/fake-rekey-guest.js';
import { FAULTS } from './helpers/firecracker/vm-model.js';
import { GRACEFUL_STOP_MS, stopVmm } from '../src/runtimes/firecracker/vmm/vmm-process.js';
import type { VmExit, VmProcess } from '../src/runtimes/vm/vm-process.js';

const API_DIR = new URL('../src/runtimes/firecracker/api/', import.meta.url);

/** A session's VM as the runtime will describe it (paths as inside the jail). */
const vmSpec: FirecrackerVmSpec = {
  vcpuCount: 2,
  memoryMiB: 1024,
  kernelImagePath: '/vmlinux',
  initrdPath: '/initrd.img',
  rootfsPath: '/rootfs.ext4',
  configDrivePath: '/config.ext4',
  tapName: 'sbx-k3v9x0a1b2',
  guestAddress: '10.241.0.6',
  leaseIndex: 1,
  vsockUdsPath: '/run/vsock.sock',
};

/** Sends a request exactly as given, bypassing the typed client: for requests broken on purpose. */
function rawRequest(socketPath: string, method: string, urlPath: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method, path: urlPath, headers: payload ? { 'content-type': 'application/json' } : {} }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function faultOf(response: { body: unknown }): string {
  return String((response.body as { fault_message?: unknown } | undefined)?.fault_message);
}

describe('firecracker: the spec artefacts', () => {
  it('the committed OpenAPI 3 document is the v1.16.1 spec', () => {
    const doc = JSON.parse(readFileSync(new URL('firecracker-openapi.json', API_DIR), 'utf8')) as { openapi: string; info: { version: string } };
    assert.match(doc.openapi, /^3\.0\./);
    assert.equal(doc.info.version, '1.16.1');
  });

  const sharedSpec = fileURLPath(new URL('../../shared/firecracker/firecracker-v1.16.1.yaml', import.meta.url));
  it(
    'the generated types were made from the spec in ../shared (same sha256)',
    { skip: existsSync(sharedSpec) ? false : `${sharedSpec} is not there to compare with` },
    () => {
      const header = readFileSync(new URL('spec-types.ts', API_DIR), 'utf8').slice(0, 1000);
      const sha = createHash('sha256').update(readFileSync(sharedSpec)).digest('hex');
      assert.match(header, /GENERATED FILE/);
      assert.match(header, /npm run gen:firecracker/);
      assert.ok(header.includes(`sha256 ${sha}`), 'spec-types.ts is stale: run `npm run gen:firecracker`');
    },
  );
});

describe('firecracker: the contract server rejects what Firecracker would', () => {
  let server: FirecrackerContractServer;
  beforeEach(async () => {
    server = await FirecrackerContractServer.start();
  });
  afterEach(async () => {
    await server.close();
  });

  const mutated: Array<[string, string, string, unknown, RegExp]> = [
    ['a string where the spec wants an integer', 'PUT', '/machine-config', { vcpu_count: 'two', mem_size_mib: 1024 }, /vcpu_count must be integer/],
    ['vcpu_count above the spec maximum', 'PUT', '/machine-config', { vcpu_count: 33, mem_size_mib: 1024 }, /vcpu_count must be <= 32/],
    [
      'a missing required field',
      'PUT',
      '/drives/rootfs',
      { path_on_host: '/rootfs.ext4', is_root_device: true, is_read_only: false },
      /required property 'drive_id'/,
    ],
    ['an unknown enum value', 'PUT', '/actions', { action_type: 'Reboot' }, /action_type must be equal to one of the allowed values/],
    [
      'an unknown field (Firecracker denies unknown fields)',
      'PUT',
      '/boot-source',
      { kernel_image_path: '/vmlinux', kernel_args: 'quiet' },
      /additional properties \(kernel_args\)/,
    ],
    ['a vsock CID below 3', 'PUT', '/vsock', { guest_cid: 2, uds_path: '/run/vsock.sock' }, /guest_cid must be >= 3/],
    [
      'a wrong nested enum',
      'PUT',
      '/snapshot/load',
      { snapshot_path: '/s', mem_backend: { backend_type: 'Memfd', backend_path: '/m' } },
      /backend_type must be equal to one of the allowed values/,
    ],
    ['a body that is not JSON', 'PUT', '/machine-config', '{"vcpu_count": 2,', /not valid JSON/],
    ['a method the path does not have (PUT /vm)', 'PUT', '/vm', { state: 'Paused' }, /Invalid request method and\/or path: PUT \/vm/],
    ['a path the spec does not have', 'PUT', '/drive/rootfs', { drive_id: 'rootfs', is_root_device: true }, /Invalid request method and\/or path/],
    [
      'a drive id that differs between path and body',
      'PUT',
      '/drives/rootfs',
      { drive_id: 'other', path_on_host: '/r', is_root_device: true, is_read_only: false },
      /does not match/,
    ],
  ];
  for (const [what, method, urlPath, body, fault] of mutated) {
    it(`rejects ${what}`, async () => {
      const res = await rawRequest(server.socketPath, method, urlPath, body);
      assert.equal(res.status, 400);
      assert.match(faultOf(res), fault);
      assert.equal(server.rejected().length, 1);
      assert.deepEqual(server.acceptedCalls(), []);
    });
  }

  it('accepts the same requests once they are right (the rejections above are not blanket ones)', async () => {
    for (const [urlPath, body] of [
      ['/machine-config', { vcpu_count: 2, mem_size_mib: 1024 }],
      ['/drives/rootfs', { drive_id: 'rootfs', path_on_host: '/rootfs.ext4', is_root_device: true, is_read_only: false }],
      ['/boot-source', { kernel_image_path: '/vmlinux', boot_args: 'quiet' }],
      ['/vsock', { guest_cid: 3, uds_path: '/run/vsock.sock' }],
    ] as const) {
      const res = await rawRequest(server.socketPath, 'PUT', urlPath, body);
      assert.equal(res.status, 204, `${urlPath}: ${faultOf(res)}`);
    }
  });

  it('a request mutated on purpose through the typed client fails as a FirecrackerApiError naming the call', async () => {
    const client = new FirecrackerClient(server.socketPath);
    try {
      const broken = { vcpu_count: 'two', mem_size_mib: 1024 } as unknown as MachineConfiguration;
      await assert.rejects(client.putMachineConfig(broken), (err: unknown) => {
        assert.ok(err instanceof FirecrackerApiError);
        assert.equal(err.call, 'PUT /machine-config');
        assert.equal(err.statusCode, 400);
        assert.match(err.faultMessage, /vcpu_count must be integer/);
        assert.match(err.message, /PUT \/machine-config failed \(HTTP 400\)/);
        return true;
      });
    } finally {
      client.close();
    }
  });
});

describe('firecracker: the state machine', () => {
  let server: FirecrackerContractServer;
  let client: FirecrackerClient;
  beforeEach(async () => {
    server = await FirecrackerContractServer.start();
    client = new FirecrackerClient(server.socketPath);
  });
  afterEach(async () => {
    client.close();
    await server.close();
  });

  const expectFault = async (call: Promise<unknown>, name: string, fault: string | RegExp) => {
    await assert.rejects(call, (err: unknown) => {
      assert.ok(err instanceof FirecrackerApiError, String(err));
      assert.equal(err.call, name);
      assert.equal(err.statusCode, 400);
      if (typeof fault === 'string') assert.equal(err.faultMessage, fault);
      else assert.match(err.faultMessage, fault);
      return true;
    });
  };

  it('refuses boot-source (and every other pre-boot call) after InstanceStart', async () => {
    await runSteps(bootSteps(vmSpec), client);
    await expectFault(client.putBootSource({ kernel_image_path: '/vmlinux' }), 'PUT /boot-source', FAULTS.postBoot);
    await expectFault(client.putDrive('extra', { path_on_host: '/x', is_root_device: false, is_read_only: true }), 'PUT /drives/extra', FAULTS.postBoot);
    await expectFault(client.putLogger({ log_path: '/log' }), 'PUT /logger', FAULTS.postBoot);
    await expectFault(client.putAction('InstanceStart'), 'PUT /actions', FAULTS.postBoot);
  });

  it('refuses PATCH /vm and SendCtrlAltDel before start', async () => {
    await expectFault(client.patchVm({ state: 'Paused' }), 'PATCH /vm', FAULTS.preBoot);
    await expectFault(client.putAction('SendCtrlAltDel'), 'PUT /actions', FAULTS.preBoot);
  });

  it('refuses snapshot/load once anything but the logger is configured', async () => {
    await client.putLogger({ log_path: '/firecracker.log', level: 'Info' });
    await client.putMachineConfig({ vcpu_count: 1, mem_size_mib: 256 });
    await expectFault(
      client.putSnapshotLoad({ snapshot_path: '/s', mem_backend: { backend_type: 'File', backend_path: '/m' } }),
      'PUT /snapshot/load',
      FAULTS.loadNotAllowed,
    );
  });

  it('refuses snapshot/create unless paused', async () => {
    await expectFault(client.putSnapshotCreate({ snapshot_path: '/s', mem_file_path: '/m' }), 'PUT /snapshot/create', FAULTS.preBoot);
    await runSteps(bootSteps(vmSpec), client);
    await expectFault(client.putSnapshotCreate({ snapshot_path: '/s', mem_file_path: '/m' }), 'PUT /snapshot/create', /not paused/);
  });

  it('refuses InstanceStart without a boot source or a root drive', async () => {
    await expectFault(client.putAction('InstanceStart'), 'PUT /actions', /without kernel configuration/);
    await client.putBootSource({ kernel_image_path: '/vmlinux' });
    await client.putDrive('config', { path_on_host: '/config.ext4', is_root_device: false, is_read_only: true });
    await expectFault(client.putAction('InstanceStart'), 'PUT /actions', /root drive/);
  });

  it('refuses a second root drive and a second metrics set-up', async () => {
    await client.putDrive('rootfs', { path_on_host: '/a', is_root_device: true, is_read_only: false });
    await expectFault(
      client.putDrive('other', { path_on_host: '/b', is_root_device: true, is_read_only: false }),
      'PUT /drives/other',
      /root block device already exists/,
    );
    await client.putMetrics({ metrics_path: '/metrics' });
    await expectFault(client.putMetrics({ metrics_path: '/metrics' }), 'PUT /metrics', /Reinitialization/);
  });
});

describe('firecracker: boot and snapshot sequences against the contract server', () => {
  let server: FirecrackerContractServer;
  let client: FirecrackerClient;
  beforeEach(async () => {
    server = await FirecrackerContractServer.start();
    client = new FirecrackerClient(server.socketPath);
  });
  afterEach(async () => {
    client.close();
    await server.close();
  });

  it('cold boot: exactly the expected calls, in order, each valid, over one kept-alive connection', async () => {
    const steps = bootSteps(vmSpec);
    assert.deepEqual(
      steps.map((s) => s.name),
      ['machine-config', 'boot-source', 'root-drive', 'config-drive', 'network-interface', 'vsock', 'instance-start'],
    );
    await runSteps(steps, client);
    assert.deepEqual(server.rejected(), []);
    assert.deepEqual(server.acceptedCalls(), COLD_BOOT_CALLS);
    assert.equal(server.connections, 1);

    assert.deepEqual(server.bodyOf('PUT /machine-config'), { vcpu_count: 2, mem_size_mib: 1024, smt: false });
    assert.deepEqual(server.bodyOf('PUT /boot-source'), { kernel_image_path: '/vmlinux', initrd_path: '/initrd.img', boot_args: DEFAULT_BOOT_ARGS });
    assert.deepEqual(server.bodyOf('PUT /drives/rootfs'), { drive_id: 'rootfs', path_on_host: '/rootfs.ext4', is_root_device: true, is_read_only: false });
    assert.deepEqual(server.bodyOf('PUT /drives/config'), { drive_id: 'config', path_on_host: '/config.ext4', is_root_device: false, is_read_only: true });
    assert.deepEqual(server.bodyOf('PUT /network-interfaces/eth0'), { iface_id: 'eth0', host_dev_name: 'sbx-k3v9x0a1b2', guest_mac: '06:00:0a:f1:00:06' });
    assert.deepEqual(server.bodyOf('PUT /vsock'), { guest_cid: 4, uds_path: '/run/vsock.sock' });
    assert.deepEqual(server.bodyOf('PUT /actions'), { action_type: 'InstanceStart' });
    assert.equal((await client.getInstanceInfo()).state, 'Running');
  });

  it('cold boot with volumes: a drive each after the config drive, read-only when asked, each valid', async () => {
    const volumePaths = [
      { path: '/volumes/vol0.ext4', readOnly: false },
      { path: '/volumes/vol1.ext4', readOnly: true },
    ];
    const steps = bootSteps({ ...vmSpec, volumePaths });
    assert.deepEqual(
      steps.map((s) => s.name).slice(2, 6),
      ['root-drive', 'config-drive', 'volume-drive-0', 'volume-drive-1'],
      'the guest takes the i-th volume for the disk after the config drive + i',
    );
    await runSteps(steps, client);
    assert.deepEqual(server.rejected(), []);
    assert.deepEqual(server.bodyOf('PUT /drives/vol0'), { drive_id: 'vol0', path_on_host: '/volumes/vol0.ext4', is_root_device: false, is_read_only: false });
    assert.deepEqual(server.bodyOf('PUT /drives/vol1'), { drive_id: 'vol1', path_on_host: '/volumes/vol1.ext4', is_root_device: false, is_read_only: true });
    assert.equal((await client.getInstanceInfo()).state, 'Running');
    // Each drive is one more virtio_mmio.device Firecracker appends to the command line.
    assert.doesNotThrow(() => bootSteps({ ...vmSpec, bootArgs: 'x'.repeat(1700) }));
    assert.throws(() => bootSteps({ ...vmSpec, bootArgs: 'x'.repeat(1700), volumePaths: Array(8).fill(volumePaths[0]) }), /2048/);
  });

  it('cold boot with a logger configures it first', async () => {
    await runSteps(bootSteps({ ...vmSpec, logger: { log_path: '/firecracker.log', level: 'Info' } }), client);
    assert.deepEqual(server.acceptedCalls(), ['PUT /logger', ...COLD_BOOT_CALLS]);
    assert.deepEqual(server.rejected(), []);
  });

  it('a failing step is named, with the API error as its cause', async () => {
    await runSteps(bootSteps(vmSpec), client);
    await assert.rejects(runSteps(bootSteps(vmSpec), client), (err: unknown) => {
      assert.ok(err instanceof VmStepError);
      assert.equal(err.step, 'machine-config');
      assert.ok(err.cause instanceof FirecrackerApiError);
      assert.equal(err.cause.call, 'PUT /machine-config');
      assert.match(
        err.message,
        /step "machine-config" failed: Firecracker PUT \/machine-config failed \(HTTP 400\): The requested operation is not supported after starting/,
      );
      return true;
    });
  });

  /**
   * A stand-in VMM process (a real `sleep`) for stopVmm: `powersOff` makes it exit as a guest
   * that honours Ctrl-Alt-Del would (the VMM ends by itself once the guest reboots).
   */
  function standInVmm(powersOff: boolean): { vmm: VmProcess; killed: () => boolean } {
    const child = spawn('sleep', ['60'], { stdio: 'ignore' });
    const exited = new Promise<VmExit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    let stopping = false;
    let killed = false;
    const watch = setInterval(() => {
      if (powersOff && server.model.shutdownRequested) child.kill('SIGTERM');
    }, 20);
    void exited.then(() => clearInterval(watch));
    const vmm: VmProcess = {
      pid: child.pid as number,
      exited,
      isAlive: () => child.exitCode === null && child.signalCode === null,
      get stopping() {
        return stopping;
      },
      markStopping: () => void (stopping = true),
      async stop() {
        stopping = true;
        killed = true;
        child.kill('SIGKILL');
        await exited;
      },
    };
    return { vmm, killed: () => killed };
  }

  it('graceful stop asks the guest with SendCtrlAltDel', async () => {
    await runSteps(bootSteps(vmSpec), client);
    // The runtime's own stop (stopVmm), not the test, sends the action.
    const guest = standInVmm(true);
    await stopVmm(guest.vmm, client, true);
    assert.equal(server.model.shutdownRequested, true);
    assert.deepEqual(server.acceptedCalls().slice(COLD_BOOT_CALLS.length), ['PUT /actions']);
    assert.deepEqual(server.bodyOf('PUT /actions'), { action_type: 'SendCtrlAltDel' });
    assert.equal(guest.killed(), false, 'the VMM ended by itself: no kill');
    assert.equal(guest.vmm.isAlive(), false);
    assert.equal(guest.vmm.stopping, true, 'its exit is not taken for a crash');
  });

  it('graceful stop kills a VMM whose guest ignores Ctrl-Alt-Del, after the grace period', async () => {
    await runSteps(bootSteps(vmSpec), client);
    const guest = standInVmm(false);
    const started = Date.now();
    await stopVmm(guest.vmm, client, true);
    assert.equal(server.model.shutdownRequested, true, 'asked first');
    assert.equal(guest.killed(), true, 'then killed');
    assert.ok(Date.now() - started >= GRACEFUL_STOP_MS - 50, `after the grace period (${Date.now() - started} ms)`);
    assert.equal(guest.vmm.isAlive(), false);
  });

  it('snapshot create: pause, then a full snapshot (and resume when asked)', async () => {
    await runSteps(bootSteps(vmSpec), client);
    const files = { snapshotPath: '/snapshot/vmstate', memFilePath: '/snapshot/memory' };
    await runSteps(snapshotCreateSteps(files), client);
    assert.deepEqual(server.acceptedCalls().slice(COLD_BOOT_CALLS.length), ['PATCH /vm', 'PUT /snapshot/create']);
    assert.deepEqual(server.bodyOf('PATCH /vm'), { state: 'Paused' });
    assert.deepEqual(server.bodyOf('PUT /snapshot/create'), { snapshot_type: 'Full', snapshot_path: '/snapshot/vmstate', mem_file_path: '/snapshot/memory' });
    assert.equal((await client.getInstanceInfo()).state, 'Paused');

    await runSteps(snapshotCreateSteps(files, { resume: true }), client);
    assert.equal((await client.getInstanceInfo()).state, 'Running');
    assert.deepEqual(server.rejected(), []);
  });

  it('snapshot restore in a fresh process: load with network and vsock overrides, then resume', async () => {
    const steps = snapshotRestoreSteps({
      files: { snapshotPath: '/snapshot/vmstate', memFilePath: '/snapshot/memory' },
      tapName: 'sbx-q1w2e3r4t5',
      vsockUdsPath: '/run/vsock.sock',
      advanceClock: true,
    });
    assert.deepEqual(
      steps.map((s) => s.name),
      ['snapshot-load', 'resume'],
    );
    await runSteps(steps, client);
    assert.deepEqual(server.rejected(), []);
    assert.deepEqual(server.acceptedCalls(), ['PUT /snapshot/load', 'PATCH /vm']);
    assert.deepEqual(server.bodyOf('PUT /snapshot/load'), {
      snapshot_path: '/snapshot/vmstate',
      mem_backend: { backend_type: 'File', backend_path: '/snapshot/memory' },
      network_overrides: [{ iface_id: 'eth0', host_dev_name: 'sbx-q1w2e3r4t5' }],
      vsock_override: { uds_path: '/run/vsock.sock' },
      resume_vm: false,
      clock_realtime: true,
    });
    assert.deepEqual(server.bodyOf('PATCH /vm'), { state: 'Resumed' });
    assert.equal((await client.getInstanceInfo()).state, 'Running');
    assert.equal(server.model.restoredFromSnapshot, true);
  });

  it('snapshot restore with a logger: the logger is the one call allowed before the load', async () => {
    await runSteps(
      snapshotRestoreSteps({
        files: { snapshotPath: '/snapshot/vmstate', memFilePath: '/snapshot/memory' },
        tapName: 'sbx-q1w2e3r4t5',
        vsockUdsPath: '/run/vsock.sock',
        logger: { log_path: '/firecracker.log' },
      }),
      client,
    );
    assert.deepEqual(server.acceptedCalls(), ['PUT /logger', 'PUT /snapshot/load', 'PATCH /vm']);
  });

  it('snapshot restore into a process that was already configured fails at snapshot-load', async () => {
    await client.putMachineConfig({ vcpu_count: 1, mem_size_mib: 128 });
    const steps = snapshotRestoreSteps({ files: { snapshotPath: '/s', memFilePath: '/m' }, tapName: 'tap0', vsockUdsPath: '/v.sock' });
    await assert.rejects(runSteps(steps, client), (err: unknown) => err instanceof VmStepError && err.step === 'snapshot-load');
  });
});

describe('firecracker: the API client', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'fc-client-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('a call that gets no answer fails after its time limit, naming the call', async () => {
    const socketPath = path.join(dir, 'silent.socket');
    const silent = net.createServer(() => {
      // Accepts and never answers.
    });
    await new Promise<void>((resolve) => silent.listen(socketPath, resolve));
    const client = new FirecrackerClient(socketPath, 200);
    try {
      const started = Date.now();
      await assert.rejects(client.putAction('InstanceStart'), (err: unknown) => {
        assert.ok(err instanceof FirecrackerTransportError);
        assert.equal(err.call, 'PUT /actions');
        assert.match(err.message, /no answer within 200 ms/);
        return true;
      });
      assert.ok(Date.now() - started < 2_000);
    } finally {
      client.close();
      silent.close();
    }
  });

  it('a socket nobody listens on is a transport error, not an API error', async () => {
    const client = new FirecrackerClient(path.join(dir, 'absent.socket'));
    try {
      await assert.rejects(client.getInstanceInfo(), (err: unknown) => err instanceof FirecrackerTransportError && err.call === 'GET /');
    } finally {
      client.close();
    }
  });

  it('refuses a socket path too long for a Unix socket, and device ids that would change the path', async () => {
    assert.throws(() => new FirecrackerClient(`/tmp/${'x'.repeat(120)}/firecracker.socket`), /at most 107/);
    const client = new FirecrackerClient(path.join(dir, 'api.socket'));
    try {
      await assert.rejects(client.putDrive('../vm', { is_root_device: false }), /invalid Firecracker device id/);
      await assert.rejects(client.putNetworkInterface('eth0?x=1', { host_dev_name: 'tap0' }), /invalid Firecracker device id/);
    } finally {
      client.close();
    }
  });

  it('waits for the API socket of a process that starts late', async () => {
    const socketPath = path.join(dir, 'late.socket');
    let late: FirecrackerContractServer | undefined;
    const client = new FirecrackerClient(socketPath);
    // The contract server picks its own socket path; a tiny proxy stands at the expected one.
    const starting = (async () => {
      await sleep(150);
      late = await FirecrackerContractServer.start();
      const target = late.socketPath;
      const proxy = net.createServer((socket) => socket.pipe(net.connect(target)).pipe(socket));
      await new Promise<void>((resolve) => proxy.listen(socketPath, resolve));
      return proxy;
    })();
    try {
      const info = await waitForApiSocket(client, { timeoutMs: 5_000 });
      assert.equal(info.state, 'Not started');
      assert.equal(info.vmm_version, '1.16.1');
    } finally {
      client.close();
      (await starting).close();
      await late?.close();
    }
  });

  it('gives up waiting at its time limit, and at once when the process exits', async () => {
    const client = new FirecrackerClient(path.join(dir, 'never.socket'));
    try {
      await assert.rejects(waitForApiSocket(client, { timeoutMs: 200 }), /did not answer within 200 ms: the socket file does not exist yet/);
      const started = Date.now();
      await assert.rejects(waitForApiSocket(client, { timeoutMs: 10_000, exited: sleep(50) }), /exited before its API socket/);
      assert.ok(Date.now() - started < 2_000);
    } finally {
      client.close();
    }
  });
});

describe('firecracker: kernel command line', () => {
  it('the default boot args start our guest init on the serial console', () => {
    assert.equal(DEFAULT_BOOT_ARGS, 'console=ttyS0 reboot=k panic=1 pci=off quiet init=/sbin/sandbox-init');
  });

  it('refuses boot args over 2048 bytes before any call is made', () => {
    assert.throws(
      () => bootSteps({ ...vmSpec, bootArgs: 'x'.repeat(KERNEL_CMDLINE_MAX_BYTES + 1) }),
      /2049 bytes long; the kernel command line holds at most 2048/,
    );
  });

  it('counts bytes, not characters', () => {
    // 1000 three-byte characters: 1000 characters, 3000 bytes.
    assert.throws(() => bootSteps({ ...vmSpec, bootArgs: '€'.repeat(1000) }), /3000 bytes/);
  });

  it('leaves room for what Firecracker appends (root=/dev/vda rw, one virtio_mmio.device per device)', () => {
    assert.throws(() => bootSteps({ ...vmSpec, bootArgs: 'x'.repeat(2000) }), /with the \d+ bytes Firecracker adds .* at most \d+ fit/);
    assert.doesNotThrow(() => bootSteps({ ...vmSpec, bootArgs: 'x'.repeat(1800) }));
  });

  it('refuses a newline or NUL in the boot args', () => {
    assert.throws(() => bootSteps({ ...vmSpec, bootArgs: 'quiet\ninit=/bin/sh' }), /NUL or newline/);
  });
});

describe('firecracker: guest identity from the address lease', () => {
  it('the MAC is 06:00 and the IPv4 octets in hex', () => {
    assert.equal(macFromIPv4('10.241.0.2'), '06:00:0a:f1:00:02');
    assert.equal(macFromIPv4('0.0.0.0'), '06:00:00:00:00:00');
    assert.equal(macFromIPv4('255.255.255.255'), '06:00:ff:ff:ff:ff');
  });

  it('the MAC is locally administered and unicast', () => {
    const first = parseInt(macFromIPv4('192.168.1.1').slice(0, 2), 16);
    assert.equal(first & 0b01, 0, 'multicast bit must be clear');
    assert.equal(first & 0b10, 0b10, 'locally administered bit must be set');
  });

  it('different addresses never share a MAC', () => {
    const macs = new Set<string>();
    for (let i = 0; i < 1024; i++) macs.add(macFromIPv4(`10.241.${i >> 6}.${(i & 63) * 4 + 2}`));
    assert.equal(macs.size, 1024);
  });

  for (const bad of ['10.0.0', '10.0.0.0.1', '256.1.1.1', '01.2.3.4', 'a.b.c.d', '', '1.2.3.-4', ' 1.2.3.4']) {
    it(`refuses ${JSON.stringify(bad)} as an address`, () => {
      assert.throws(() => macFromIPv4(bad), /not an IPv4 address/);
    });
  }

  it('the vsock CID is 3 + the lease index', () => {
    assert.equal(guestCidForLease(0), 3);
    assert.equal(guestCidForLease(16383), 16386);
    assert.throws(() => guestCidForLease(-1), /no valid vsock CID/);
    assert.throws(() => guestCidForLease(1.5), /no valid vsock CID/);
    assert.throws(() => guestCidForLease(0xffff_ffff), /no valid vsock CID/);
  });
});

describe('firecracker: the jailer', () => {
  const options: JailerOptions = {
    jailerBin: '/usr/local/bin/jailer',
    firecrackerBin: '/usr/local/bin/firecracker',
    id: jailId('sbx-', 'k3v9x0a1b2'),
    uid: 64000,
    gid: 64000,
    chrootBaseDir: '/srv/jailer',
    netnsName: 'sbx-k3v9x0a1b2',
    cgroupVersion: 2,
    limits: { memoryMiB: 1024, vcpus: 2, pidsMax: 64 },
  };

  it('builds the command line for cgroup v2', () => {
    assert.deepEqual(jailerArgv(options), [
      '/usr/local/bin/jailer',
      '--id',
      'sbx-k3v9x0a1b2',
      '--exec-file',
      '/usr/local/bin/firecracker',
      '--uid',
      '64000',
      '--gid',
      '64000',
      '--chroot-base-dir',
      '/srv/jailer',
      '--netns',
      '/var/run/netns/sbx-k3v9x0a1b2',
      '--cgroup-version',
      '2',
      '--cgroup',
      `memory.max=${(1024 + 128) * 1024 * 1024}`,
      '--cgroup',
      'cpu.max=200000 100000',
      '--cgroup',
      'pids.max=64',
      '--new-pid-ns',
      '--',
      '--api-sock',
      '/run/firecracker.socket',
    ]);
  });

  it('builds the command line for cgroup v1, with a parent cgroup and a file limit', () => {
    const argv = jailerArgv({ ...options, cgroupVersion: 1, parentCgroup: 'sbx', maxOpenFiles: 1024, limits: { memoryMiB: 512, vcpus: 0.5 } });
    const cgroups = argv.flatMap((arg, i) => (argv[i - 1] === '--cgroup' ? [arg] : []));
    assert.deepEqual(cgroups, [`memory.limit_in_bytes=${(512 + 128) * 1024 * 1024}`, 'cpu.cfs_period_us=100000', 'cpu.cfs_quota_us=50000']);
    assert.deepEqual(argv.slice(argv.indexOf('--cgroup-version'), argv.indexOf('--cgroup-version') + 4), ['--cgroup-version', '1', '--parent-cgroup', 'sbx']);
    assert.ok(argv.join(' ').includes('--resource-limit no-file=1024'));
  });

  it('puts Firecracker in a pid namespace of its own, keeping our console log: --new-pid-ns, no --daemonize', () => {
    const argv = jailerArgv(options);
    assert.ok(!argv.includes('--daemonize'));
    assert.ok(argv.includes('--new-pid-ns'));
    assert.deepEqual(argv.slice(argv.indexOf('--')), ['--', '--api-sock', '/run/firecracker.socket']);
  });

  for (const bad of ['sbx_k3v9x0a1b2', 'sbx-k3v9/..', '', 'x'.repeat(65), 'sbx k3v9']) {
    it(`refuses the jail id ${JSON.stringify(bad.length > 20 ? bad.slice(0, 8) + '…' : bad)}`, () => {
      assert.throws(() => jailerArgv({ ...options, id: bad }), /invalid jailer id/);
    });
  }

  it('accepts a 64-character id, and makes ids from our prefix and the session id', () => {
    assert.doesNotThrow(() => jailerArgv({ ...options, id: 'a'.repeat(64) }));
    assert.throws(() => jailId('sbx_', 'k3v9x0a1b2'), /invalid jailer id/);
  });

  it('refuses a binary the jailer would refuse, root ids and relative paths', () => {
    assert.throws(() => jailerArgv({ ...options, firecrackerBin: '/usr/bin/fc-1.16' }), /must contain "firecracker"|contains "firecracker"/);
    assert.throws(() => jailerArgv({ ...options, uid: 0 }), /uid must be a positive integer/);
    assert.throws(() => jailerArgv({ ...options, gid: 0 }), /gid must be a positive integer/);
    assert.throws(() => jailerArgv({ ...options, chrootBaseDir: 'srv/jailer' }), /absolute/);
    assert.throws(() => jailerArgv({ ...options, netnsName: '../evil' }), /network namespace/);
  });

  it('lays out the chroot: shared files linked, the rootfs copied, the API given in-jail paths', () => {
    const layout = chrootLayout({
      chrootBaseDir: '/srv/jailer',
      firecrackerBin: '/usr/local/bin/firecracker',
      id: 'sbx-k3v9x0a1b2',
      kernel: '/var/lib/sandboxes/images/abc/vmlinux',
      initrd: '/var/lib/sandboxes/images/abc/initrd.img',
      rootfsSource: '/var/lib/sandboxes/images/abc/rootfs.ext4',
      configDrive: '/var/lib/sandboxes/k3v9x0a1b2/config.ext4',
    });
    const root = '/srv/jailer/firecracker/sbx-k3v9x0a1b2/root';
    assert.equal(layout.jailDir, '/srv/jailer/firecracker/sbx-k3v9x0a1b2');
    assert.equal(layout.rootDir, root);
    assert.deepEqual(layout.directories, [`${root}/run`, `${root}/snapshot`]);
    assert.deepEqual(layout.files, [
      { source: '/var/lib/sandboxes/images/abc/vmlinux', target: `${root}/vmlinux`, method: 'link', writable: false, ownedByJail: false },
      { source: '/var/lib/sandboxes/images/abc/initrd.img', target: `${root}/initrd.img`, method: 'link', writable: false, ownedByJail: false },
      { source: '/var/lib/sandboxes/images/abc/rootfs.ext4', target: `${root}/rootfs.ext4`, method: 'copy', writable: true, ownedByJail: true },
      { source: '/var/lib/sandboxes/k3v9x0a1b2/config.ext4', target: `${root}/config.ext4`, method: 'link', writable: false, ownedByJail: true },
    ]);
    assert.deepEqual(layout.apiSocket, { hostPath: `${root}/run/firecracker.socket`, jailPath: '/run/firecracker.socket' });
    assert.deepEqual(layout.vsockSocket, { hostPath: `${root}/run/vsock.sock`, jailPath: '/run/vsock.sock' });
    assert.deepEqual(layout.vmPaths, {
      kernelImagePath: '/vmlinux',
      initrdPath: '/initrd.img',
      rootfsPath: '/rootfs.ext4',
      configDrivePath: '/config.ext4',
      vsockUdsPath: '/run/vsock.sock',
      volumePaths: [],
    });
    assert.deepEqual(layout.snapshot.jailPaths, { snapshotPath: '/snapshot/vmstate', memFilePath: '/snapshot/memory' });
    assert.deepEqual(layout.snapshot.hostPaths, { snapshotPath: `${root}/snapshot/vmstate`, memFilePath: `${root}/snapshot/memory` });
  });

  it('the chroot is named after the firecracker binary, and a restore links the template snapshot in', () => {
    const layout = chrootLayout({
      chrootBaseDir: '/srv/j',
      firecrackerBin: '/opt/firecracker-v1.16.1-x86_64',
      id: 'sbx-q1w2e3r4t5',
      kernel: '/img/vmlinux',
      rootfsSource: '/templates/abc/rootfs.ext4',
      configDrive: '/s/config.ext4',
      restoreFrom: { snapshotPath: '/templates/abc/vmstate', memFilePath: '/templates/abc/memory' },
    });
    const root = '/srv/j/firecracker-v1.16.1-x86_64/sbx-q1w2e3r4t5/root';
    assert.equal(layout.rootDir, root);
    assert.equal(layout.vmPaths.initrdPath, undefined);
    assert.ok(!layout.files.some((f) => f.target.endsWith('initrd.img')));
    assert.deepEqual(layout.files.slice(-2), [
      { source: '/templates/abc/vmstate', target: `${root}/snapshot/vmstate`, method: 'link', writable: false, ownedByJail: false },
      { source: '/templates/abc/memory', target: `${root}/snapshot/memory`, method: 'link', writable: false, ownedByJail: false },
    ]);
  });

  it('the in-jail paths are the same for every VM, so one snapshot serves every clone', () => {
    const a = chrootLayout({
      chrootBaseDir: '/srv/j',
      firecrackerBin: '/b/firecracker',
      id: 'sbx-aaaaaaaaaa',
      kernel: '/k',
      rootfsSource: '/r',
      configDrive: '/c1',
    });
    const b = chrootLayout({
      chrootBaseDir: '/srv/j',
      firecrackerBin: '/b/firecracker',
      id: 'sbx-bbbbbbbbbb',
      kernel: '/k',
      rootfsSource: '/r',
      configDrive: '/c2',
    });
    assert.deepEqual(a.vmPaths, b.vmPaths);
    assert.notEqual(a.rootDir, b.rootDir);
  });

  it('refuses a chroot base so deep that the sockets could not be reached', () => {
    assert.throws(
      () =>
        chrootLayout({
          chrootBaseDir: `/srv/${'deep/'.repeat(12)}`,
          firecrackerBin: '/b/firecracker',
          id: 'sbx-aaaaaaaaaa',
          kernel: '/k',
          rootfsSource: '/r',
          configDrive: '/c',
        }),
      /API socket .* bytes long; a Unix socket path may have at most 107/,
    );
  });
});

describe('firecracker: key rotation after a snapshot restore', () => {
  const paths = GUEST_KEY_PATHS;
  const template = fakeKeys('template');
  const session = fakeKeys('session');
  const plan = (phases?: RotationPhase[]) => ({
    snapshotBase: { clientPrivateKey: template.clientPrivateKey, hostPublicKey: template.hostPublicKey },
    session,
    paths,
    reconnectAttempts: 5,
    reconnectDelayMs: 1,
    onPhase: (phase: RotationPhase) => phases?.push(phase),
  });
  const newGuest = () => new FakeRekeyGuest(paths, template);

  it('the fake guest starts as the template: its key works, the session key does not', () => {
    const guest = newGuest();
    assert.equal(guest.login(template.clientPrivateKey, template.hostPublicKey), 'accepted');
    assert.equal(guest.login(session.clientPrivateKey, template.hostPublicKey), 'auth-refused');
    assert.equal(guest.login(template.clientPrivateKey, session.hostPublicKey), 'host-key-mismatch');
  });

  it('installs the session keys, verifies the template key is refused, and only then hands out the session connection', async () => {
    const guest = newGuest();
    const phases: RotationPhase[] = [];
    const connection = await rotateKeysAfterRestore(guest, plan(phases));
    const eventsAtHandOut = [...guest.events];

    assert.deepEqual(phases, ['connect-template', 'write-keys', 'reload-sshd', 'connect-session', 'verify-template-refused', 'ready']);
    assert.deepEqual(eventsAtHandOut, [
      'connect template-client pin template-host: accepted',
      `write ${paths.hostKey} 600 by template-client`,
      `write ${paths.hostKeyPub} 644 by template-client`,
      `write ${paths.authorizedKeys} 600 by template-client`,
      `write ${paths.rootAuthorizedKeys} 600 by template-client`,
      'reload by template-client',
      'connect session-client pin session-host: accepted',
      'try template-client pin session-host: auth-refused',
      'try session-client pin template-host: host-key-mismatch',
      'close template-client',
    ]);
    // What was handed out is the session's own connection, and the only one left open.
    assert.equal(connection.clientKeyName, 'session-client');
    assert.equal(connection.closed, false);
    assert.deepEqual([...guest.openConnections], [connection]);
    // The end state, checked independently of the rotation's own verification.
    assert.equal(guest.login(template.clientPrivateKey, session.hostPublicKey), 'auth-refused');
    assert.equal(guest.login(template.clientPrivateKey, template.hostPublicKey), 'host-key-mismatch');
    assert.equal(guest.login(session.clientPrivateKey, session.hostPublicKey), 'accepted');
    assert.equal(guest.files.get(paths.authorizedKeys)?.data, `${session.clientPublicKey}\n`);
    assert.equal(guest.files.get(paths.hostKey)?.mode, 0o600);
  });

  it('rides out sshd restarting after the reload', async () => {
    const guest = newGuest();
    guest.unreachableLoginsAfterReload = 2;
    const connection = await rotateKeysAfterRestore(guest, plan());
    assert.equal(connection.clientKeyName, 'session-client');
    assert.equal(guest.events.filter((e) => e.endsWith(': unreachable')).length, 2);
  });

  /** Runs a rotation that must fail, and checks nothing was handed out or left open. */
  const expectRefusal = async (guest: FakeRekeyGuest, phase: RotationPhase, message: RegExp) => {
    const phases: RotationPhase[] = [];
    await assert.rejects(rotateKeysAfterRestore(guest, plan(phases)), (err: unknown) => {
      assert.ok(err instanceof KeyRotationError, String(err));
      assert.equal(err.phase, phase);
      assert.match(err.message, message);
      return true;
    });
    assert.ok(!phases.includes('ready'), 'a failed rotation must never reach ready');
    assert.equal(guest.openConnections.size, 0, 'every connection is closed after a failed rotation');
  };

  it('refuses to hand out a guest whose template key still works (a second authorized_keys file)', async () => {
    const guest = newGuest();
    guest.files.set('/home/user/.ssh/authorized_keys', { data: template.clientPublicKey + '\n', mode: 0o600 });
    guest.authorizedKeysFiles.push('/home/user/.ssh/authorized_keys');
    await expectRefusal(guest, 'verify-template-refused', /template's client key is still accepted/);
  });

  it('refuses a guest that still presents the template host key next to the new one', async () => {
    const guest = newGuest();
    guest.reloadKeepsOldHostKey = true;
    await expectRefusal(guest, 'verify-template-refused', /still presents the template's host key/);
  });

  it('refuses a guest whose sshd did not pick up the new host key', async () => {
    const guest = newGuest();
    guest.reloadIgnored = true;
    await expectRefusal(guest, 'connect-session', /host-key-mismatch/);
  });

  it('refuses when the keys cannot be written, without reloading sshd', async () => {
    const guest = newGuest();
    guest.failWritesTo = paths.authorizedKeys;
    await expectRefusal(guest, 'write-keys', /permission denied/);
    assert.ok(!guest.events.some((e) => e.startsWith('reload')));
    assert.ok(!guest.events.some((e) => e.startsWith('connect session')));
  });

  it('refuses when the refusal of the template key cannot be confirmed', async () => {
    const guest = newGuest();
    const realTryLogin = guest.tryLogin.bind(guest);
    guest.tryLogin = async (key, pin) => {
      guest.unreachable = true; // the guest goes away right after the session login
      return realTryLogin(key, pin);
    };
    await expectRefusal(guest, 'verify-template-refused', /could not confirm .* unreachable/);
  });

  it('refuses a snapshot that is not the expected template', async () => {
    const guest = new FakeRekeyGuest(paths, fakeKeys('another-template'));
    await expectRefusal(guest, 'connect-template', /host-key-mismatch/);
    assert.ok(!guest.events.some((e) => e.startsWith('write')));
  });
});

describe('firecracker: a real Firecracker process', () => {
  const firecrackerBin = process.env.FIRECRACKER_BIN || findOnPath('firecracker');
  const missing = kvmUnavailable() ?? (firecrackerBin ? undefined : 'no firecracker binary: set FIRECRACKER_BIN or put firecracker on PATH');
  let dir: string | undefined;
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  // The runtime's sequences against a real microVM: test/firecracker-runtime.test.ts.
  it('answers our client as the contract server does', { skip: missing ?? false }, async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'fc-real-'));
    const socketPath = path.join(dir, 'api.socket');
    const child = spawn(firecrackerBin as string, ['--api-sock', socketPath], { stdio: 'ignore' });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const client = new FirecrackerClient(socketPath);
    try {
      const info = await waitForApiSocket(client, { exited });
      assert.equal(info.state, 'Not started');
      assert.match((await client.getVersion()).firecracker_version, /^1\.16\./);
      await client.putMachineConfig({ vcpu_count: 1, mem_size_mib: 128, smt: false });
      await assert.rejects(client.patchVm({ state: 'Paused' }), (err: unknown) => err instanceof FirecrackerApiError && err.call === 'PATCH /vm');
    } finally {
      client.close();
      child.kill('SIGKILL');
      await exited;
    }
  });
});

function fileURLPath(url: URL): string {
  return decodeURIComponent(url.pathname);
}
