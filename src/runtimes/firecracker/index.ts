/**
 * # The Firecracker runtime: API layer
 *
 * Production runs every sandbox as a Firecracker microVM, jailed. This folder holds the part
 * of that runtime that talks to Firecracker, held to the official API spec of v1.16.1
 * (`../shared/firecracker/firecracker-v1.16.1.yaml`). The `Runtime` class that starts
 * processes, makes disks and TAP devices builds on it (it waits on the qemu runtime's guest
 * kernel, ext4 image, config drive and TAP code).
 *
 * ## The pieces
 *
 * | file | job |
 * | --- | --- |
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
 * | `keys/key-rotation.ts` | after a snapshot restore: replace the template's SSH keys, verify, then hand out |
 *
 * The contract test server (`test/helpers/firecracker/`) validates every request against
 * the spec's schemas and enforces Firecracker's state machine; `test/firecracker-api.test.ts`
 * runs every sequence here against it.
 *
 * ## How the runtime composes them
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
 * Template snapshot (once per image hash): cold-boot a template VM with its own template
 * keys, wait until SSH answers (the desktop is up), `runSteps(snapshotCreateSteps(
 * layout.snapshot.jailPaths))`, kill it, and keep its snapshot files (`snapshot.hostPaths`)
 * *and its rootfs as it was when paused*: a clone's disk must match the memory it resumes.
 *
 * Restore: a fresh jail with `chrootLayout({ ..., rootfsSource: template rootfs,
 * restoreFrom: template snapshot })`, spawn, wait for the socket, then
 * `runSteps(snapshotRestoreSteps({ files: layout.snapshot.jailPaths, tapName,
 * vsockUdsPath: layout.vmPaths.vsockUdsPath, advanceClock: true }), client)`, then
 * `rotateKeysAfterRestore(...)`, and only then hand the session out.
 *
 * ## What a snapshot carries, and what follows (decisions for the runtime)
 *
 * - **Disk paths.** The snapshot records the drives' `path_on_host`; v1.16.1 has no
 *   override for them (only `network_overrides` and `vsock_override`). Every clone must find
 *   its own disks at the template's paths: that is what the jailer's per-VM chroot gives,
 *   with the fixed in-jail names of chroot-layout.ts. Restore therefore requires the jailer.
 * - **Guest network identity.** The guest's MAC, its IP configuration (set by its init from
 *   the template's config drive) and its vsock CID are in the snapshot; `network_overrides`
 *   only swaps the TAP. Every clone wakes up with the template's address. Each clone has its
 *   own netns, so they do not collide, but the host cannot reach them all at one address:
 *   the netns must map the session's leased address to the template's (DNAT/SNAT inside the
 *   namespace), or the guest must be re-addressed over the rotation connection. The MAC and
 *   CID derivation in guest-identity.ts apply to cold boots.
 * - **Per-session config.** The clone never reads its config drive (the template read its
 *   own at boot): keys are replaced by keys/key-rotation.ts; hostname and screen size are
 *   the template's too (one template per screen size, or a resize after restore).
 * - **Guest clock.** Restore with `advanceClock` (`clock_realtime`, x86_64), or the clone
 *   keeps the template's date and TLS in its browser fails.
 * - **Key rotation needs the guest's help.** Today sshd reads its host key and
 *   authorized_keys from the read-only config drive, and logins are as the unprivileged
 *   guest user. For snapshots the guest image must read them from a writable, root-owned
 *   place (e.g. PROPOSED_GUEST_KEY_PATHS) and offer the rotation a privileged way to write
 *   there and SIGHUP sshd (e.g. a forced-command template key running a small root helper
 *   that reads the files from standard input). See keys/key-rotation.ts.
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
 * The test that boots a real microVM (`test/firecracker-api.test.ts`, "boots a real
 * microVM") runs by itself where `/dev/kvm` and a firecracker binary exist, and says why it
 * skips elsewhere.
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
export { cgroupSettings, jailerArgv, JAILED_API_SOCKET, type CgroupVersion, type JailerOptions, type VmLimits } from './jailer/jailer-args.js';
export { assertJailId, jailId } from './jailer/jail-id.js';
export { chrootLayout, type ChrootFile, type ChrootInputs, type ChrootLayout } from './jailer/chroot-layout.js';
export {
  KeyRotationError,
  PROPOSED_GUEST_KEY_PATHS,
  rotateKeysAfterRestore,
  type GuestKeyPaths,
  type LoginOutcome,
  type RotationConnection,
  type RotationPhase,
  type RotationPlan,
  type RotationTransport,
} from './keys/key-rotation.js';
