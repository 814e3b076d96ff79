import type {
  BootSource,
  Drive,
  InstanceActionInfo,
  InstanceInfo,
  MachineConfiguration,
  NetworkInterface,
  SnapshotCreateParams,
  SnapshotLoadParams,
  Vm,
  Vsock,
} from '../../../src/runtimes/firecracker/api/types.js';
import type { MatchedOperation } from './spec-validator.js';

/**
 * Firecracker's life cycle, as its API enforces it, for requests that already match the
 * spec's schemas. Pure: no sockets, no timers; the contract server feeds it one request at
 * a time. Fault messages are Firecracker's own where we know them.
 *
 * When a call may be made comes from the spec's own words where it has them ("Pre-boot
 * only." / "Post-boot only." in an operation's summary), plus what the spec says elsewhere
 * or not at all: the logger and metrics are configured before boot; `PATCH /vm` needs a
 * started (or loaded) VM; `PUT /snapshot/load` needs a fresh process ("before configuring
 * any resource other than the Logger and Metrics"); `PUT /snapshot/create` needs a paused
 * VM. One rule is ours, stricter than Firecracker: InstanceStart needs a root drive too,
 * since a sandbox without one is always a mistake.
 */

export const FAULTS = {
  postBoot: 'The requested operation is not supported after starting the microVM.',
  preBoot: 'The requested operation is not supported before starting the microVM.',
  loadNotAllowed: 'Loading a microVM snapshot not allowed after configuring boot-specific resources.',
} as const;

type Phase = 'pre-boot' | 'post-boot' | 'any';

/** Where the spec's summaries are silent (or the brief of this contract is stricter). */
const PHASE_OVERRIDES: Record<string, Phase> = {
  'PUT /logger': 'pre-boot',
  'PUT /metrics': 'pre-boot',
  'PATCH /vm': 'post-boot',
  // Decided per action below.
  'PUT /actions': 'any',
};

export type Outcome = { status: 200; body: unknown } | { status: 204 } | { status: 400; fault: string };

const ok204: Outcome = { status: 204 };
const fault = (message: string): Outcome => ({ status: 400, fault: message });

export class FirecrackerVmModel {
  state: InstanceInfo['state'] = 'Not started';
  restoredFromSnapshot = false;
  shutdownRequested = false;
  machineConfig: MachineConfiguration = { vcpu_count: 1, mem_size_mib: 128, smt: false };
  bootSource: BootSource | undefined;
  readonly drives = new Map<string, Drive>();
  readonly networkInterfaces = new Map<string, NetworkInterface>();
  vsock: Vsock | undefined;
  loggerConfigured = false;
  metricsConfigured = false;
  /** Boot-specific resources configured so far (anything but the logger and metrics). */
  private readonly bootResources = new Set<string>();
  readonly snapshotsCreated: SnapshotCreateParams[] = [];
  snapshotLoaded: SnapshotLoadParams | undefined;

  constructor(readonly vmmVersion: string) {}

  apply(operation: MatchedOperation, body: unknown): Outcome {
    const call = `${operation.method} ${operation.template}`;
    const phase = PHASE_OVERRIDES[call] ?? phaseFromSummary(operation.summary);
    const started = this.state !== 'Not started';
    if (phase === 'pre-boot' && started) return fault(FAULTS.postBoot);
    if (phase === 'post-boot' && !started) return fault(FAULTS.preBoot);

    switch (call) {
      case 'GET /':
        return { status: 200, body: this.instanceInfo() };
      case 'GET /version':
        return { status: 200, body: { firecracker_version: this.vmmVersion } };
      case 'GET /machine-config':
        return { status: 200, body: this.machineConfig };
      case 'PUT /logger':
        this.loggerConfigured = true;
        return ok204;
      case 'PUT /metrics':
        if (this.metricsConfigured) return fault('Reinitialization of metrics not allowed.');
        this.metricsConfigured = true;
        return ok204;
      case 'PUT /machine-config':
        return this.putMachineConfig(body as MachineConfiguration);
      case 'PUT /boot-source':
        return this.putBootSource(body as BootSource);
      case 'PUT /drives/{drive_id}':
        return this.putDrive(operation.pathParams.drive_id ?? '', body as Drive);
      case 'PUT /network-interfaces/{iface_id}':
        return this.putNetworkInterface(operation.pathParams.iface_id ?? '', body as NetworkInterface);
      case 'PUT /vsock':
        this.vsock = body as Vsock;
        this.bootResources.add('vsock');
        return ok204;
      case 'PUT /actions':
        return this.action((body as InstanceActionInfo).action_type);
      case 'PATCH /vm':
        this.state = (body as Vm).state === 'Paused' ? 'Paused' : 'Running';
        return ok204;
      case 'PUT /snapshot/create':
        if (this.state !== 'Paused') return fault('Cannot create a snapshot of a microVM that is not paused: pause it first (PATCH /vm).');
        this.snapshotsCreated.push(body as SnapshotCreateParams);
        return ok204;
      case 'PUT /snapshot/load':
        return this.loadSnapshot(body as SnapshotLoadParams);
      default:
        // The rest of the spec (balloon, MMDS, pmem, ...) is accepted once it passed the
        // schema and phase checks, and counts as boot-specific configuration. Reads of it
        // are not modelled: better a clear refusal than an answer the fake made up.
        if (operation.method === 'GET') return fault(`The contract server does not model ${call}.`);
        this.bootResources.add(call);
        return ok204;
    }
  }

  instanceInfo(): InstanceInfo {
    return { app_name: 'Firecracker', id: 'anonymous-instance', state: this.state, vmm_version: this.vmmVersion };
  }

  private putMachineConfig(config: MachineConfiguration): Outcome {
    if (config.smt && config.vcpu_count > 1 && config.vcpu_count % 2 !== 0) {
      return fault('The vCPU number is invalid! The vCPU number can only be 1 or an even number when SMT is enabled.');
    }
    if (config.huge_pages === '2M' && config.mem_size_mib % 2 !== 0) {
      return fault('The memory size (MiB) must be a multiple of 2 when 2M huge pages are used.');
    }
    this.machineConfig = config;
    this.bootResources.add('machine-config');
    return ok204;
  }

  private putBootSource(source: BootSource): Outcome {
    // 2048 bytes with the NUL, before Firecracker adds its own arguments.
    if (source.boot_args !== undefined && Buffer.byteLength(source.boot_args) >= 2048) {
      return fault('Invalid kernel command line: the command line is too long.');
    }
    this.bootSource = source;
    this.bootResources.add('boot-source');
    return ok204;
  }

  private putDrive(pathId: string, drive: Drive): Outcome {
    if (drive.drive_id !== pathId) return fault('The id from the path does not match the id from the body!');
    // The spec marks these "required for virtio-block" in prose only.
    if (drive.socket === undefined && (drive.path_on_host === undefined || drive.is_read_only === undefined)) {
      return fault('A virtio-block drive needs path_on_host and is_read_only.');
    }
    if (drive.is_root_device) {
      for (const other of this.drives.values()) {
        if (other.is_root_device && other.drive_id !== drive.drive_id) return fault('A root block device already exists!');
      }
    }
    this.drives.set(pathId, drive);
    this.bootResources.add(`drive ${pathId}`);
    return ok204;
  }

  private putNetworkInterface(pathId: string, iface: NetworkInterface): Outcome {
    if (iface.iface_id !== pathId) return fault('The id from the path does not match the id from the body!');
    for (const other of this.networkInterfaces.values()) {
      if (other.iface_id === iface.iface_id) continue;
      if (other.host_dev_name === iface.host_dev_name) return fault(`The host device name ${iface.host_dev_name} is already in use.`);
      if (iface.guest_mac && other.guest_mac === iface.guest_mac) return fault(`The guest MAC address ${iface.guest_mac} is already in use.`);
    }
    if (iface.guest_mac !== undefined && !/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(iface.guest_mac)) {
      return fault(`Invalid MAC address: ${iface.guest_mac}`);
    }
    this.networkInterfaces.set(pathId, iface);
    this.bootResources.add(`network-interface ${pathId}`);
    return ok204;
  }

  private action(action: InstanceActionInfo['action_type']): Outcome {
    const started = this.state !== 'Not started';
    switch (action) {
      case 'InstanceStart':
        if (started) return fault(FAULTS.postBoot);
        if (!this.bootSource) return fault('Cannot start microvm without kernel configuration.');
        if (![...this.drives.values()].some((d) => d.is_root_device)) return fault('No root drive is configured: a sandbox must boot from its rootfs.');
        this.state = 'Running';
        return ok204;
      case 'SendCtrlAltDel':
        if (!started) return fault(FAULTS.preBoot);
        this.shutdownRequested = true;
        return ok204;
      case 'FlushMetrics':
        if (!this.metricsConfigured) return fault('The metrics system is not initialized.');
        return ok204;
    }
  }

  private loadSnapshot(params: SnapshotLoadParams): Outcome {
    if (this.bootResources.size > 0) return fault(FAULTS.loadNotAllowed);
    if ((params.mem_file_path === undefined) === (params.mem_backend === undefined)) {
      return fault('Exactly one of mem_file_path and mem_backend must be given.');
    }
    this.snapshotLoaded = params;
    this.restoredFromSnapshot = true;
    this.state = params.resume_vm ? 'Running' : 'Paused';
    return ok204;
  }
}

function phaseFromSummary(summary: string): Phase {
  if (/pre-boot only/i.test(summary)) return 'pre-boot';
  if (/post-boot only/i.test(summary)) return 'post-boot';
  return 'any';
}
