import { assertUnixSocketPath } from '../unix-socket-path.js';
import { guestCidForLease, macFromIPv4 } from './guest-identity.js';
import { assertBootArgsFit, DEFAULT_BOOT_ARGS } from './kernel-args.js';
import type { VmStep } from './steps.js';
import { CONFIG_DRIVE_ID, GUEST_IFACE_ID, ROOT_DRIVE_ID, type FirecrackerVmSpec } from './vm-spec.js';

/** Two drives, one NIC (at most), one vsock: the virtio devices Firecracker announces on the command line (and a drive per volume). */
const VIRTIO_DEVICES = 4;
/** Volumes are vdc to vdz in the guest (sandbox-init finds them by that order). */
const MAX_VOLUME_DRIVES = 24;

/** The drive id of the i-th volume. */
export function volumeDriveId(index: number): string {
  return `vol${index}`;
}

/**
 * The cold-boot sequence, in the order Firecracker's docs give: (logger), machine-config,
 * boot-source, drives (root first), network interface (none without a TAP), vsock, then InstanceStart. Every
 * value is computed and checked here, before a step runs, so a bad spec fails before any
 * process is started rather than half-way through configuring one.
 */
export function bootSteps(spec: FirecrackerVmSpec): VmStep[] {
  if (!Number.isInteger(spec.vcpuCount) || spec.vcpuCount < 1 || spec.vcpuCount > 32) {
    throw new Error(`vcpu count must be an integer from 1 to 32 (Firecracker's range), got ${spec.vcpuCount}`);
  }
  if (!Number.isInteger(spec.memoryMiB) || spec.memoryMiB < 1) {
    throw new Error(`memory must be a positive whole number of MiB, got ${spec.memoryMiB}`);
  }
  const volumes = spec.volumePaths ?? [];
  if (volumes.length > MAX_VOLUME_DRIVES) throw new Error(`at most ${MAX_VOLUME_DRIVES} volume drives, got ${volumes.length}`);
  const bootArgs = spec.bootArgs ?? DEFAULT_BOOT_ARGS;
  assertBootArgsFit(bootArgs, VIRTIO_DEVICES + volumes.length);
  const tapName = spec.tapName;
  if (tapName && !spec.guestAddress) throw new Error('a NIC needs the guest address its MAC is derived from');
  const guestMac = tapName ? macFromIPv4(spec.guestAddress as string) : undefined;
  // No lease, no number of its own: the first guest CID (hybrid vsock is per VM, so a CID shared with another VM reaches nothing of it).
  const guestCid = guestCidForLease(spec.leaseIndex ?? 0);
  assertUnixSocketPath(spec.vsockUdsPath, 'the vsock socket');

  const steps: VmStep[] = [];
  const logger = spec.logger;
  if (logger) {
    // First, so that Firecracker's complaints about everything after it are logged.
    steps.push({ name: 'logger', run: (c) => c.putLogger({ ...logger, show_level: true, show_log_origin: false }) });
  }
  steps.push(
    {
      name: 'machine-config',
      // SMT off: it is the default, and a guest that sees sibling threads could try to
      // schedule for a topology the host does not give it.
      run: (c) => c.putMachineConfig({ vcpu_count: spec.vcpuCount, mem_size_mib: spec.memoryMiB, smt: false }),
    },
    {
      name: 'boot-source',
      run: (c) =>
        c.putBootSource({
          kernel_image_path: spec.kernelImagePath,
          ...(spec.initrdPath ? { initrd_path: spec.initrdPath } : {}),
          boot_args: bootArgs,
        }),
    },
    {
      // The root drive is always the first block device: /dev/vda, and Firecracker adds
      // `root=/dev/vda rw` to the command line for it.
      name: 'root-drive',
      run: (c) => c.putDrive(ROOT_DRIVE_ID, { path_on_host: spec.rootfsPath, is_root_device: true, is_read_only: false }),
    },
    {
      name: 'config-drive',
      run: (c) => c.putDrive(CONFIG_DRIVE_ID, { path_on_host: spec.configDrivePath, is_root_device: false, is_read_only: true }),
    },
    // After the config drive, in order: the guest takes the i-th volume for the disk after vdb + i.
    ...volumes.map((volume, i): VmStep => ({
      name: `volume-drive-${i}`,
      run: (c) => c.putDrive(volumeDriveId(i), { path_on_host: volume.path, is_root_device: false, is_read_only: volume.readOnly }),
    })),
    ...(tapName
      ? [{ name: 'network-interface', run: (c) => c.putNetworkInterface(GUEST_IFACE_ID, { host_dev_name: tapName, guest_mac: guestMac }) } satisfies VmStep]
      : []),
    {
      name: 'vsock',
      run: (c) => c.putVsock({ guest_cid: guestCid, uds_path: spec.vsockUdsPath }),
    },
    { name: 'instance-start', run: (c) => c.putAction('InstanceStart') },
  );
  return steps;
}
