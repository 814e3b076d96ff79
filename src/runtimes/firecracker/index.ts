/**
 * # The Firecracker runtime
 *
 * Production runs every sandbox as a Firecracker microVM, jailed. `FirecrackerRuntime`
 * (firecracker-runtime.ts) is the `Runtime`; everything it sends Firecracker is held to the
 * official API spec of v1.16.1 (`../shared/firecracker/firecracker-v1.16.1.yaml`).
 *
 * ## The pieces
 *
 * | file | job |
 * | --- | --- |
 * | `firecracker-runtime.ts` | `FirecrackerRuntime`: start (jailed or not), list, reclaim |
 * | `settings.ts` | FIRECRACKER_BIN, JAILER_BIN and the SBX_FC_* settings |
 * | `host/host-check.ts` | is KVM usable, where are the binaries, which version, which cgroup version; every problem with its fix |
 * | `kernel/vmlinux.ts` | unpacks the image's bzImage into the ELF vmlinux Firecracker boots, once |
 * | `vmm/vmm-process.ts` | graceful stop (Ctrl-Alt-Del, then kill), finding our VMMs after a crash |
 * | `jailer/apply-chroot.ts`, `../vm/cgroups.ts` | makes a VM's chroot from its layout; removes chroot and cgroups |
 * | `api/spec-types.ts`, `api/firecracker-openapi.json` | generated from the spec by `npm run gen:firecracker`; committed |
 * | `api/types.ts` | names for the bodies the runtime sends, taken from the generated types |
 * | `api/client.ts` | `FirecrackerClient`: one typed method per call, over the Unix socket, a time limit per call |
 * | `api/errors.ts` | `FirecrackerApiError` (Firecracker said no: call, status, fault_message), `FirecrackerTransportError` (no answer) |
 * | `api/wait-for-socket.ts` | waits, bounded, until a new process's API answers `GET /` |
 * | `boot/boot-steps.ts` | the cold-boot sequence as named steps (`bootSteps`) |
 * | `boot/snapshot-steps.ts` | `snapshotCreateSteps` (pause, create) and `snapshotRestoreSteps` (load with overrides, resume) |
 * | `boot/steps.ts` | `runSteps`: in order, a failure names its step (`VmStepError`) |
 * | `boot/kernel-args.ts` | default boot args, and the 2048-byte command line budget |
 * | `boot/guest-identity.ts` | the guest MAC (`06:00:` + the IPv4 octets) and vsock CID (3 + lease index) |
 * | `jailer/jailer-args.ts` | the jailer's argument vector, with cgroup v1/v2 limits |
 * | `jailer/chroot-layout.ts` | what goes where in the chroot, and the in-jail paths to give the API |
 * | `keys/key-rotation.ts` | after a snapshot restore: replace the snapshot base's SSH keys, verify, then hand out |
 *
 * The contract test server (`test/helpers/firecracker/`) validates every request against
 * the spec's schemas and enforces Firecracker's state machine; `test/firecracker-api.test.ts`
 * runs every sequence here against it, and `test/firecracker-runtime.test.ts` runs the
 * runtime itself against stand-ins for the firecracker and jailer binaries built on it
 * (`test/helpers/firecracker/bin/`), down to booting the configured VM under QEMU.
 *
 * ## How the runtime composes them (what FirecrackerRuntime.start does)
 *
 * Cold boot of one session (each resource's release pushed on the session's cleanup stack
 * the moment it is taken, as the container runtime does):
 *  1. The session layer has made the keys, the config dir, the network namespace, the TAP
 *     device inside it, and the address lease.
 *  2. `chrootLayout({ chrootBaseDir, firecrackerBin, id: jailId(prefix, sessionId), kernel,
 *     initrd, rootfsSource: image ext4, configDrive })`; apply it: make `directories`, link
 *     or copy `files` (a link falls back to a copy across filesystems; the rootfs copy is a
 *     reflink where possible), chown the writable ones and the directories to the jail's
 *     uid:gid. Release: remove `jailDir` (the jailer never cleans up).
 *  3. Spawn `jailerArgv({...})` with stdout and stderr to `<sessionDir>/console.log` (the
 *     guest console is Firecracker's standard output), as our child (no `--daemonize`).
 *     Release: graceful stop (below), then remove the cgroup the jailer made
 *     (`<cgroup root>/<parent cgroup>/<id>`, `rmdir` once the process is gone).
 *  4. `client = new FirecrackerClient(layout.apiSocket.hostPath)`;
 *     `await waitForApiSocket(client, { exited })`.
 *  5. `await runSteps(bootSteps({ ...layout.vmPaths, tapName, guestAddress, leaseIndex,
 *     vcpuCount, memoryMiB }), client)`.
 *  6. Wait for SSH on the guest address with the pinned host key (`transport/`), as today.
 *
 * Graceful stop: `putAction('SendCtrlAltDel')` (x86 only); the guest's init powers off,
 * the kernel reboots (`reboot=k`) and Firecracker exits. If it has not exited within a few
 * seconds, SIGKILL the jailer's child. Then `client.close()`.
 *
 * Without the jailer (development hosts), spawn `firecracker --api-sock
 * <sessionDir>/firecracker.socket` inside the netns (`ip netns exec`), give host paths to
 * the boot steps, and skip step 2. Snapshots need the jailer: see below.
 *
 * Snapshot base (SBX_FC_SNAPSHOTS=on; `prepare()`, once per image and screen size, kept
 * in `<image dir>/firecracker-template-<w>x<h>/`, snapshot/base-store.ts): cold-boot a
 * base VM with its own keys, its key's root access to sbx-rekey
 * (snapshot/base-config.ts) and its own link-local address (snapshotBaseAddress); wait until its desktop
 * answers; `runSteps(snapshotCreateSteps(layout.snapshot.jailPaths))`; kill it; keep its
 * snapshot files *and its rootfs as it was when paused* (a clone's disk must match the
 * memory it resumes), root-owned and readable by the jails' group only.
 *
 * Restore (a session of the snapshot base's screen size): a fresh jail with `chrootLayout({ ...,
 * rootfsSource: snapshot base rootfs, restoreFrom: snapshot base })`, spawn, wait for the
 * socket, `runSteps(snapshotRestoreSteps({ files: layout.snapshot.jailPaths, tapName,
 * vsockUdsPath: layout.vmPaths.vsockUdsPath, advanceClock: true }), client)`, then
 * `rotateClone(...)` (snapshot/clone-rotation.ts), and only then hand the session out. Any
 * failure destroys the clone like any failed start. Other screen sizes boot cold.
 *
 * ## What a snapshot carries, and what follows (decisions for the runtime)
 *
 * - **Disk paths.** The snapshot records the drives' `path_on_host`; v1.16.1 has no
 *   override for them (only `network_overrides` and `vsock_override`). Every clone must find
 *   its own disks at the snapshot base's paths: that is what the jailer's per-VM chroot gives,
 *   with the fixed in-jail names of chroot-layout.ts. Restore therefore requires the jailer.
 * - **Guest network identity.** The guest's MAC, its IP configuration (set by its init from
 *   the snapshot base's config drive) and its vsock CID are in the snapshot; `network_overrides`
 *   only swaps the TAP. Every clone wakes up with the snapshot base's address, its snapshot base's address,
 *   a link-local /30 no lease takes (derived from the resource prefix). Decision: the guest is re-addressed over the rotation
 *   connection (`sbx-rekey network`). To reach a fresh clone the host puts the snapshot base's
 *   gateway address on that clone's host veth for the few logins of the rotation; since
 *   every clone answers at the same address, rotations are serialised per host (a DNAT in
 *   each netns was the alternative: more moving parts, for every packet of the session).
 *   The MAC and CID derivation in guest-identity.ts apply to cold boots; clones keep the
 *   snapshot base's (each is alone in its netns).
 * - **Per-session config.** The clone never reads its config drive (the snapshot base read its
 *   own at boot): keys are replaced by keys/key-rotation.ts; hostname, display number and
 *   screen size are the snapshot base's (one snapshot base per screen size; its display and pids limit
 *   are the orchestrator's, given to prepare(), as every session's are).
 * - **Guest clock.** Restore with `advanceClock` (`clock_realtime`, x86_64), or the clone
 *   keeps the snapshot base's date and TLS in its browser fails.
 * - **Key rotation needs the guest's help**, and has it: in a VM, sshd reads its keys from
 *   a tmpfs copy of the config drive (GUEST_KEY_PATHS), and a snapshot base's config adds a
 *   root key that may run only sbx-rekey, which writes them from its standard input,
 *   SIGHUPs sshd and moves eth0 to the session's address. See keys/key-rotation.ts.
 * - **Device names.** The root drive is /dev/vda and the config drive /dev/vdb; the guest
 *   init is best off finding the config drive by its filesystem label.
 *
 * ## What a KVM host needs
 *
 * - `/dev/kvm` readable and writable by the orchestrator (root, or the `kvm` group): the
 *   `kvm_intel` or `kvm_amd` module loaded, virtualization enabled in firmware (or nested
 *   virtualization on a cloud VM). `/dev/net/tun` for the TAP devices.
 * - Firecracker and jailer v1.16.x, the static release builds of the same version, found
 *   through `FIRECRACKER_BIN` and `JAILER_BIN` or on `PATH`. The firecracker binary's file
 *   name must contain "firecracker" (the jailer refuses anything else); it also names the
 *   chroot directory (`<chroot base>/<that name>/<id>/root`).
 * - A chroot base dir on the same filesystem as the image cache (so kernel and snapshot
 *   files can be hard-linked) and short enough that `<base>/<exec>/<id>/root/run/
 *   firecracker.socket` fits the 107 bytes of a Unix socket path (checked). A dedicated
 *   unprivileged uid/gid for the jailed VMMs.
 * - cgroup v1 or v2 (pass the one the host runs, `--cgroup-version`); on v2 the memory, cpu
 *   and pids controllers enabled for the parent cgroup.
 * - The guest kernel as an uncompressed ELF `vmlinux` (Firecracker on x86_64 boots nothing
 *   else; Debian ships a compressed vmlinuz, which must be unpacked, e.g. with the kernel's
 *   `scripts/extract-vmlinux`), with virtio-mmio and command-line devices
 *   (CONFIG_VIRTIO_MMIO, CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES), virtio-blk, virtio-net,
 *   virtio-vsock and the 8250 serial console, built in or in the initrd.
 *
 * The end-to-end test on a real microVM (`test/firecracker-runtime.test.ts`) runs by itself
 * where `/dev/kvm` and a firecracker binary exist, and says why it skips elsewhere.
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
} from './keys/key-rotation.js';
export { FirecrackerRuntime } from './firecracker-runtime.js';
export { firecrackerSettingsFromEnv, type FirecrackerSettings } from './settings.js';
export { checkFirecrackerHost, kvmUnavailable, type FirecrackerHost } from './host/host-check.js';
export { ensureVmlinux } from './kernel/vmlinux.js';
export { rotateClone, snapshotBaseAddress, type CloneRotation, type SnapshotBaseAddress } from './snapshot/clone-rotation.js';
export { loadSnapshotBase, snapshotBaseDir, type SnapshotBase } from './snapshot/base-store.js';
export { SshRotationTransport } from './keys/ssh-rotation-transport.js';
