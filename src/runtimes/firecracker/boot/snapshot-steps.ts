import { SNAPSHOT_CALL_TIMEOUT_MS } from '../api/client.js';
import type { Logger } from '../api/types.js';
import { assertUnixSocketPath } from '../unix-socket-path.js';
import type { VmStep } from './steps.js';
import { GUEST_IFACE_ID } from './vm-spec.js';

/** A snapshot is two files: the microVM state (devices, vCPUs) and the guest memory. */
export interface SnapshotFiles {
  snapshotPath: string;
  memFilePath: string;
}

/**
 * Takes a full snapshot of a running VM: pause, write both files, and (for a VM that goes
 * on serving) resume. A base VM is usually destroyed after its snapshot instead.
 *
 * What a snapshot keeps, and every clone therefore inherits: the paths of the drives (a
 * clone must find its own copies at the same paths: hence the jailer, whose chroot gives
 * every VM the same paths), the guest's MAC, IP configuration and vsock CID, and whatever
 * the guest holds in memory, including its SSH keys (see ssh-keys/key-rotation.ts).
 */
export function snapshotCreateSteps(files: SnapshotFiles, options: { resume?: boolean } = {}): VmStep[] {
  const steps: VmStep[] = [
    { name: 'pause', run: (c) => c.patchVm({ state: 'Paused' }) },
    {
      name: 'snapshot-create',
      run: (c) =>
        c.putSnapshotCreate(
          { snapshot_type: 'Full', snapshot_path: files.snapshotPath, mem_file_path: files.memFilePath },
          { timeoutMs: SNAPSHOT_CALL_TIMEOUT_MS },
        ),
    },
  ];
  if (options.resume) steps.push({ name: 'resume', run: (c) => c.patchVm({ state: 'Resumed' }) });
  return steps;
}

export interface SnapshotRestore {
  files: SnapshotFiles;
  /** This clone's TAP device; replaces the snapshot base's (`network_overrides`). Absent: the snapshot base had no NIC either. */
  tapName?: string;
  /** This clone's vsock socket; replaces the snapshot base's (`vsock_override`). */
  vsockUdsPath: string;
  /**
   * Advance the guest clock by the time since the snapshot (`clock_realtime`, x86_64 only).
   * Without it a clone wakes up with the snapshot base's date, and TLS in its browser fails.
   */
  advanceClock?: boolean;
  logger?: Pick<Logger, 'log_path' | 'level'>;
}

/**
 * Starts a VM from a snapshot, in a fresh Firecracker process: only the logger (and
 * metrics) may be configured before `PUT /snapshot/load`; machine, drives, NIC and vsock
 * all come from the snapshot. The VM is loaded paused and resumed as a step of its own, so
 * a failure says whether loading or resuming broke.
 *
 * After the resume the guest still carries the snapshot base's keys: the session must not be
 * handed out until ssh-keys/key-rotation.ts has run.
 */
export function snapshotRestoreSteps(restore: SnapshotRestore): VmStep[] {
  assertUnixSocketPath(restore.vsockUdsPath, 'the vsock socket');
  const steps: VmStep[] = [];
  const logger = restore.logger;
  if (logger) steps.push({ name: 'logger', run: (c) => c.putLogger({ ...logger, show_level: true, show_log_origin: false }) });
  steps.push(
    {
      name: 'snapshot-load',
      run: (c) =>
        c.putSnapshotLoad(
          {
            snapshot_path: restore.files.snapshotPath,
            // mem_backend rather than the deprecated mem_file_path. A File backend is mapped
            // copy-on-write, so one memory file serves every clone.
            mem_backend: { backend_type: 'File', backend_path: restore.files.memFilePath },
            ...(restore.tapName ? { network_overrides: [{ iface_id: GUEST_IFACE_ID, host_dev_name: restore.tapName }] } : {}),
            vsock_override: { uds_path: restore.vsockUdsPath },
            resume_vm: false,
            ...(restore.advanceClock ? { clock_realtime: true } : {}),
          },
          { timeoutMs: SNAPSHOT_CALL_TIMEOUT_MS },
        ),
    },
    { name: 'resume', run: (c) => c.patchVm({ state: 'Resumed' }) },
  );
  return steps;
}
