/**
 * The Firecracker runtime: every sandbox a jailed microVM, every API call typed from the
 * official v1.16.1 spec. What each file does, how a start composes them, what a snapshot
 * carries and the key rotation it needs are in docs/firecracker.md.
 */
export { FirecrackerClient, DEFAULT_CALL_TIMEOUT_MS, SNAPSHOT_CALL_TIMEOUT_MS, type CallOptions } from './api/client.js';
export { FirecrackerApiError, FirecrackerTransportError } from './api/errors.js';
export { waitForApiSocket, type WaitForApiOptions } from './api/wait-for-socket.js';
export type * from './api/types.js';
export { bootSteps } from './boot/boot-steps.js';
export { snapshotCreateSteps, snapshotRestoreSteps, type SnapshotFiles, type SnapshotRestore } from './boot/snapshot-steps.js';
export { runSteps, VmStepError, type VmStep } from './boot/steps.js';
export { assertBootArgsFit, DEFAULT_BOOT_ARGS, KERNEL_CMDLINE_MAX_BYTES } from './boot/kernel-args.js';
export { guestCidForLease, macFromIPv4 } from './boot/guest-identity.js';
export { CONFIG_DRIVE_ID, GUEST_IFACE_ID, ROOT_DRIVE_ID, type FirecrackerVmSpec } from './boot/vm-spec.js';
export { jailerArgv, JAILED_API_SOCKET, type JailerOptions } from './jailer/jailer-args.js';
export { cgroupSettings, type CgroupVersion, type VmLimits } from '../vm/cgroups.js';
export { assertJailId, jailId } from './jailer/jail-id.js';
export { chrootLayout, type ChrootFile, type ChrootInputs, type ChrootLayout } from './jailer/chroot-layout.js';
export {
  KeyRotationError,
  GUEST_KEY_PATHS,
  rotateKeysAfterRestore,
  type GuestKeyPaths,
  type LoginOutcome,
  type RotationConnection,
  type RotationPhase,
  type RotationPlan,
  type RotationTransport,
} from './ssh-keys/key-rotation.js';
export { FirecrackerRuntime } from './firecracker-runtime.js';
export { firecrackerSettingsFromEnv, type FirecrackerSettings } from './settings.js';
export { checkFirecrackerHost, kvmUnavailable, type FirecrackerHost } from './host/host-check.js';
export { ensureVmlinux } from './kernel/vmlinux.js';
export { rotateClone, snapshotBaseAddress, type CloneRotation, type SnapshotBaseAddress } from './snapshot/clone-rotation.js';
export { loadSnapshotBase, snapshotBaseDir, type SnapshotBase } from './snapshot/base-store.js';
export { SshRotationTransport } from './ssh-keys/ssh-rotation-transport.js';
