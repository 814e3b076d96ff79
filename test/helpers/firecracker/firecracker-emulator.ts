/**
 * A stand-in for the `firecracker` binary on hosts without KVM (these CI machines), run by
 * bin/firecracker. It is the contract server (every request held to the v1.16.1 spec and
 * Firecracker's state machine) listening where `--api-sock` says, plus what the real
 * process does on the host around its API:
 *  - it checks, as Firecracker does when a call is applied, that the kernel and drive files
 *    open with the access asked for, that the TAP exists in its network namespace and that
 *    the vsock socket's directory is writable: run by the (stand-in) jailer as the jail's
 *    uid, that proves the runtime's ownership and chroot layout for real;
 *  - with FAKE_FIRECRACKER_GUEST=qemu, InstanceStart boots the configured VM for real, with
 *    QEMU's microvm under TCG: the same kernel (the vmlinux the runtime unpacked, booted at
 *    its PVH entry), initrd, boot args plus what Firecracker appends (`root=/dev/vda rw`),
 *    drives in order (volumes too), TAP and MAC. The console goes to stdout, as Firecracker's does, and
 *    the process ends when the guest does (a guest reboot ends Firecracker);
 *  - SendCtrlAltDel presses Ctrl-Alt-Del in that guest (QMP send-key); without a guest it
 *    behaves as a guest that powers off at once: the process exits;
 *  - PATCH /vm pauses and resumes that guest (QMP stop, cont); snapshot/create writes the two
 *    files where asked before it answers (the state as the VM's configuration in JSON, the
 *    memory file of the guest's size, sparse; with a guest running, it holds the guest's
 *    QEMU migration stream, its length said in the state); snapshot/load checks that they,
 *    the TAP of network_overrides and the vsock_override directory are there. With
 *    FAKE_FIRECRACKER_GUEST=qemu and a guest's stream in the snapshot, the load starts that
 *    guest again from it (QEMU -incoming, loaded paused) before it answers; otherwise a
 *    restored VM has no guest behind it;
 *  - it binds the vsock socket as Firecracker does, and answers `CONNECT <port>` there as
 *    FAKE_FIRECRACKER_VSOCK says (vsock-mux.ts: by default, as when no guest listens).
 *
 * Every request, and the process's uid, gid and network namespace, are appended as JSON
 * lines to `$FAKE_FIRECRACKER_RECORD_DIR/<id>.jsonl` for the tests to read.
 *
 * Paths: jailed, the stand-in jailer cannot chroot a Node.js program, so it passes the jail's
 * root in FAKE_FIRECRACKER_ROOT and every path from the API is resolved under it, as the
 * chroot would.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, appendFileSync, constants, createReadStream, readFileSync, readlinkSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { pipeline } from 'node:stream/promises';
import net from 'node:net';
import path from 'node:path';
import type {
  BootSource,
  Drive,
  InstanceActionInfo,
  NetworkInterface,
  SnapshotCreateParams,
  SnapshotLoadParams,
  Vm,
  Vsock,
} from '../../../src/runtimes/firecracker/api/types.js';
import { hostTscKhz } from '../../../src/runtimes/qemu/accelerator.js';
import { qemuArgv } from '../../../src/runtimes/qemu/qemu-command.js';
import { FirecrackerContractServer } from './contract-server.js';
import { connectWhenListening, migrateGuestTo, untilStatus } from './guest-snapshot.js';
import { listenHybridVsock, vsockBehaviour } from './vsock-mux.js';

const args = process.argv.slice(2);
function option(name: string): string | undefined {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : undefined;
}
// The options Firecracker has that the runtime or the jailer pass; anything else is refused
// as Firecracker refuses an unknown argument.
const KNOWN = new Set(['--api-sock', '--id', '--start-time-us', '--start-time-cpu-us', '--parent-cpu-time-us']);
if (args.includes('--version')) {
  console.log('Firecracker v1.16.1 (contract emulator)');
  process.exit(0);
}
for (let i = 0; i < args.length; i += 2) {
  if (!KNOWN.has(args[i] as string) || args[i + 1] === undefined) {
    console.error(`Arguments parsing error: unexpected argument '${args[i]}'`);
    process.exit(1);
  }
}
const apiSock = option('--api-sock') ?? '/run/firecracker.socket';
const id = option('--id') ?? 'anonymous-instance';
if (!/^[A-Za-z0-9-]{1,64}$/.test(id)) {
  console.error(`Invalid instance ID: ${id}`);
  process.exit(1);
}
const root = process.env.FAKE_FIRECRACKER_ROOT ?? '';
const inJail = (p: string) => (root ? path.join(root, p) : p);
const recordFile = process.env.FAKE_FIRECRACKER_RECORD_DIR ? path.join(process.env.FAKE_FIRECRACKER_RECORD_DIR, `${id}.jsonl`) : undefined;
const record = (entry: unknown) => {
  if (recordFile) appendFileSync(recordFile, JSON.stringify(entry) + '\n');
};
record({ process: { pid: process.pid, uid: process.getuid?.(), gid: process.getgid?.(), netns: readlinkSync('/proc/self/ns/net'), argv: args, root } });

function opens(file: string, mode: number, what: string): string | undefined {
  try {
    accessSync(inJail(file), mode);
    return undefined;
  } catch (err) {
    return `Unable to open the ${what} ${file}: ${(err as NodeJS.ErrnoException).code}`;
  }
}

function tapExists(name: string): boolean {
  // /proc/self/net is this process's network namespace (/sys would be the host's).
  return readFileSync('/proc/self/net/dev', 'utf8')
    .split('\n')
    .some((line) => line.trim().startsWith(`${name}:`));
}

function hostCheck(call: string, body: unknown): string | undefined {
  switch (call) {
    case 'PUT /boot-source': {
      const source = body as BootSource;
      return (
        opens(source.kernel_image_path, constants.R_OK, 'kernel image') ??
        (source.initrd_path ? opens(source.initrd_path, constants.R_OK, 'initrd') : undefined)
      );
    }
    case 'PUT /drives/{drive_id}': {
      const drive = body as Drive;
      if (!drive.path_on_host) return undefined;
      return opens(drive.path_on_host, drive.is_read_only ? constants.R_OK : constants.R_OK | constants.W_OK, 'block device backing file');
    }
    case 'PUT /network-interfaces/{iface_id}': {
      const name = (body as NetworkInterface).host_dev_name;
      return tapExists(name) ? undefined : `Open tap device failed: ${name} does not exist in this network namespace`;
    }
    case 'PUT /vsock':
      return opens(path.dirname((body as Vsock).uds_path), constants.W_OK, 'directory of the vsock socket');
    case 'PUT /snapshot/create': {
      const params = body as SnapshotCreateParams;
      return (
        opens(path.dirname(params.snapshot_path), constants.W_OK, 'snapshot directory') ??
        (params.mem_file_path ? opens(path.dirname(params.mem_file_path), constants.W_OK, 'memory file directory') : undefined)
      );
    }
    case 'PUT /snapshot/load': {
      const params = body as SnapshotLoadParams;
      const memory = params.mem_backend?.backend_path ?? params.mem_file_path;
      const tap = params.network_overrides?.[0]?.host_dev_name;
      return (
        opens(params.snapshot_path, constants.R_OK, 'snapshot file') ??
        (memory ? opens(memory, constants.R_OK, 'memory file') : undefined) ??
        (tap && !tapExists(tap) ? `Open tap device failed: ${tap} does not exist in this network namespace` : undefined) ??
        (params.vsock_override ? opens(path.dirname(params.vsock_override.uds_path), constants.W_OK, 'directory of the vsock socket') : undefined)
      );
    }
    default:
      return undefined;
  }
}

let server: FirecrackerContractServer;
const khz = process.env.FAKE_FIRECRACKER_GUEST === 'qemu' ? await hostTscKhz() : undefined;
let qemu: ChildProcess | undefined;
const qmpSocket = inJail('/run/emulator-qmp.sock');
/** Where the guest's QEMU sends its migration stream (a snapshot) or takes it (a load); in the jail's /run, or unjailed in /tmp. */
const migrationSocket = root ? inJail('/run/emulator-mig.sock') : path.join(os.tmpdir(), `fcemu-mig-${process.pid}.sock`);

/** Boots the configured guest; `incoming`: loaded from a migration stream on the migration socket instead, paused (-S). */
function bootGuest(incoming = false): void {
  const model = server.model;
  const source = model.bootSource as BootSource;
  const drives = [...model.drives.values()];
  const rootDrive = drives.find((d) => d.is_root_device) as Drive;
  // After the root: the config drive, then the volumes in order (vdc, vdd...: the guest finds them so).
  const [configDrive, ...volumeDrives] = drives.filter((d) => !d.is_root_device);
  const iface = [...model.networkInterfaces.values()][0] as NetworkInterface;
  const machine = model.machineConfig;
  const argv = qemuArgv({
    name: `fcemu-${id}`.slice(0, 60),
    accelerator: 'tcg',
    smp: machine.vcpu_count,
    memoryMiB: machine.mem_size_mib,
    kernel: inJail(source.kernel_image_path),
    initrd: source.initrd_path ? inJail(source.initrd_path) : undefined,
    // What Firecracker appends for a read-write root drive; TCG needs the TSC rate (see accelerator.ts).
    cmdline: `${source.boot_args ?? ''} root=/dev/vda rw${khz ? ` tsc_early_khz=${khz}` : ''}`,
    rootDisk: inJail(rootDrive.path_on_host as string),
    rootDiskFormat: 'raw',
    configDrive: inJail(configDrive?.path_on_host as string),
    volumes: volumeDrives.map((d) => ({ file: inJail(d.path_on_host as string), readOnly: d.is_read_only ?? false })),
    tap: iface.host_dev_name,
    mac: iface.guest_mac ?? '06:00:00:00:00:01',
    pidFile: inJail('/run/emulator-qemu.pid'),
    runAs: process.getuid?.() === 0 ? 'nobody' : undefined,
  });
  // setpriv --pdeathsig: QEMU dies with us, even when we are SIGKILLed.
  qemu = spawn(
    'setpriv',
    [
      '--pdeathsig',
      'SIGKILL',
      '--',
      process.env.SBX_QEMU_BIN || 'qemu-system-x86_64',
      ...argv,
      '-qmp',
      `unix:${qmpSocket},server=on,wait=off`,
      ...(incoming ? ['-S', '-incoming', `unix:${migrationSocket}`] : []),
    ],
    {
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  qemu.on('exit', (code, signal) => {
    console.error(`[firecracker-emulator] the guest's QEMU ended (${signal ?? code}): Firecracker exits when its guest does`);
    void server.close().finally(() => process.exit(0));
  });
}

function ctrlAltDel(): void {
  if (!qemu) {
    // No guest to ask: behave as one that powers off at once.
    setTimeout(() => void server.close().finally(() => process.exit(0)), 50);
    return;
  }
  const keys = ['ctrl', 'alt', 'delete'].map((data) => ({ type: 'qcode', data }));
  const qmp = net.connect(qmpSocket);
  qmp.on('error', () => undefined);
  qmp.on('connect', () => {
    qmp.write(JSON.stringify({ execute: 'qmp_capabilities' }) + '\n');
    qmp.end(JSON.stringify({ execute: 'send-key', arguments: { keys } }) + '\n');
  });
}

/**
 * What Firecracker leaves on disk for a snapshot: the state file (here, the configuration the
 * VM was given, as JSON) and the memory file (of the guest's memory size, sparse). With a
 * guest running (paused: PATCH /vm came first), its QEMU migration stream is the memory
 * file's first bytes, and the state says how many: a load starts the guest again from it.
 */
async function writeSnapshot(params: SnapshotCreateParams): Promise<void> {
  const model = server.model;
  const memFile = params.mem_file_path ? inJail(params.mem_file_path) : undefined;
  const guestStream = qemu && memFile ? await migrateGuestTo(qmpSocket, migrationSocket, memFile) : undefined;
  const state = {
    machine: model.machineConfig,
    bootSource: model.bootSource,
    drives: [...model.drives.values()],
    nics: [...model.networkInterfaces.values()],
    vsock: model.vsock,
    ...(guestStream !== undefined ? { guestStream } : {}),
  };
  writeFileSync(inJail(params.snapshot_path), JSON.stringify(state), { mode: 0o600 });
  if (memFile) {
    if (guestStream === undefined) writeFileSync(memFile, '', { mode: 0o600 });
    const guestBytes = model.machineConfig.mem_size_mib * 1024 * 1024;
    if (statSync(memFile).size < guestBytes) truncateSync(memFile, guestBytes);
  }
}

/** A load: the snapshot's guest started again from its stream, loaded and paused, before the load answers. */
async function loadGuest(params: SnapshotLoadParams): Promise<void> {
  if (process.env.FAKE_FIRECRACKER_GUEST !== 'qemu') return;
  const state = JSON.parse(readFileSync(inJail(params.snapshot_path), 'utf8')) as {
    machine: typeof server.model.machineConfig;
    bootSource: BootSource;
    drives: Drive[];
    nics: NetworkInterface[];
    guestStream?: number;
  };
  const memFile = params.mem_backend?.backend_path ?? params.mem_file_path;
  if (state.guestStream === undefined || !memFile) return;
  // The VM as the snapshot says, for bootGuest (the model's boot-specific resources stay unset: nothing was configured).
  const model = server.model;
  model.machineConfig = state.machine;
  model.bootSource = state.bootSource;
  for (const drive of state.drives) model.drives.set(drive.drive_id, drive);
  for (const nic of state.nics) {
    const override = params.network_overrides?.find((o) => o.iface_id === nic.iface_id);
    model.networkInterfaces.set(nic.iface_id, override ? { ...nic, host_dev_name: override.host_dev_name } : nic);
  }
  rmSync(migrationSocket, { force: true });
  bootGuest(true);
  const connection = await connectWhenListening(migrationSocket);
  await pipeline(createReadStream(inJail(memFile), { start: 0, end: state.guestStream - 1 }), connection);
  await untilStatus(
    qmpSocket,
    'query-status',
    (r) => r.status === 'paused',
    (r) => (r.status === 'running' || r.status === 'internal-error' ? `the guest is ${String(r.status)} after its load` : undefined),
  );
  if (params.resume_vm) qmp('cont');
}

function qmp(execute: string): void {
  if (!qemu) return;
  const connection = net.connect(qmpSocket);
  connection.on('error', () => undefined);
  connection.on('connect', () => {
    connection.write(JSON.stringify({ execute: 'qmp_capabilities' }) + '\n');
    connection.end(JSON.stringify({ execute }) + '\n');
  });
}

/** Firecracker binds the vsock socket when the device is made: at PUT /vsock, or at a snapshot load (vsock-mux.ts). */
function listenVsock(udsPath: string): void {
  listenHybridVsock(inJail(udsPath), vsockBehaviour(process.env.FAKE_FIRECRACKER_VSOCK), (line) => record({ vsockConnect: line }));
}

function afterAccepted(call: string, body: unknown): void | Promise<void> {
  if (call === 'PUT /vsock') listenVsock((body as Vsock).uds_path);
  const override = call === 'PUT /snapshot/load' ? (body as SnapshotLoadParams).vsock_override : undefined;
  if (override) listenVsock(override.uds_path);
  if (call === 'PATCH /vm') qmp((body as Vm).state === 'Paused' ? 'stop' : 'cont');
  if (call === 'PUT /snapshot/create') return writeSnapshot(body as SnapshotCreateParams);
  if (call === 'PUT /snapshot/load') return loadGuest(body as SnapshotLoadParams);
  if (call !== 'PUT /actions') return;
  const action = (body as InstanceActionInfo).action_type;
  if (action === 'InstanceStart' && process.env.FAKE_FIRECRACKER_GUEST === 'qemu') bootGuest();
  if (action === 'SendCtrlAltDel') ctrlAltDel();
}

server = await FirecrackerContractServer.start({
  socketPath: inJail(apiSock),
  hostCheck,
  afterAccepted,
  onRequest: (r) => record({ call: r.call, body: r.body, status: r.status, fault: r.fault }),
});
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    qemu?.kill('SIGKILL');
    void server.close().finally(() => process.exit(0));
  });
}
