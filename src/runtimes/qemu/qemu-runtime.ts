import type { Logger } from 'pino';
import type { GuestImage } from '../../guest/image/builder.js';
import { chmod, chown, rm } from 'node:fs/promises';
import { readSessionKeys } from '../../transport/ssh-keys.js';
import { copySnapshotDisk, readForkInfo, saveSnapshot, writeRekeyKey } from './snapshot.js';
import { loadForkState, startAndRekeyFork } from './fork.js';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import type { QemuSettings } from './settings.js';
import { buildConfigDrive } from '../../guest/config-drive.js';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import { guestKernelCmdline } from '../../guest/kernel-cmdline.js';
import type { ResourceNames } from '../../network/names.js';
import { attachedNetwork, deleteTapBridge, type TapOwner } from '../../network/netns.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { run } from '../../util/exec.js';
import { DEFAULT_CONSOLE_LOG_LIMITS, type ConsoleLogLimits } from '../console-log.js';
import { openConsole } from '../console-pipe.js';
import type { GuestEndpoint } from '../../transport/index.js';
import {
  RuntimeUnavailableError,
  type Accelerator,
  type AdoptedSandbox,
  type RunningSandbox,
  type Runtime,
  type RuntimeCapabilities,
  type SandboxSpec,
  type PauseMode,
  type PauseResult,
  type PauseTarget,
  type PausedOnDisk,
} from '../runtime.js';
import { qmp, qmpSocketOf, qmpStatus } from './qmp.js';
import { processStartTime } from '../../host/process-watch.js';
import { hostTscKhz, probeKvm } from './accelerator.js';
import { createOverlay } from './overlay-disk.js';
import { macAddressFor, qemuArgv, qemuVolumeSerial, TCG_TB_SIZE_MIB } from './qemu-command.js';
import { adoptVmm, imageDiskMiB, initrdFor, killOrphanVmms, vmExited, vmStartError } from '../vm/vm-common.js';
import { vsockFallbackReason } from './vsock-fallback.js';
import { netnsArgv, spawnInNetns, spawnLoggedWithStream, type VmExit, type VmProcess } from '../vm/vm-process.js';
import type { Duplex } from 'node:stream';
import { findQemuProcesses, waitForPidFile } from './qemu-process.js';
import type { RecordResource } from '../runtime.js';
import { grantVolumes, lendVolumes, prepareVmVolumes, returnListedVolumes } from '../vm/vm-volumes.js';
import { hostCgroupVersion, removeVmCgroups, type CgroupVersion } from '../vm/cgroups.js';
import { VmCgroup } from '../vm/vm-cgroup.js';
import { VmUserPool, vmUserRange } from '../vm/vm-user-pool.js';
import { QemuDiskPause, stateMaxMiB, type LiveVm } from './disk-pause.js';
import { removeState, writeRecipe } from './disk-state.js';
import { ROOT_DISK_IN_QEMU, volumesInQemu, withDrivesOpen, writableVolumeFiles } from './drives.js';

/**
 * Under TCG, QEMU's translated-code cache (TCG_TB_SIZE_MIB) and TCG's own bookkeeping come
 * on top of the guest's memory and the VMM's usual overhead (VMM_MEMORY_OVERHEAD_MIB): its
 * cgroup allows this much more. (Seen: a TCG guest of 1 GiB with the default 1 GiB cache
 * reached 1.4 GiB of anonymous memory while typing into xev.)
 */
const TCG_EXTRA_MIB = TCG_TB_SIZE_MIB + 256;
/** QEMU's threads: main loop, one per vCPU, RCU, and its I/O worker pool (up to 64). */
const QEMU_PIDS_MAX = 128;

/** Boot timeouts when SBX_QEMU_BOOT_TIMEOUT_MS is not set: TCG boots take ~10-15 s here. */
const DEFAULT_BOOT_TIMEOUT_MS: Record<Accelerator, number> = { kvm: 30_000, tcg: 90_000 };

/**
 * The qemu runtime: each sandbox is a `qemu-system-x86_64 -M microvm` VM booting the guest
 * image's kernel, initrd and ext4 root, with KVM where it works and TCG (software) otherwise.
 * It proves the whole path Firecracker will take: kernel, initrd, ext4 root, config drive,
 * TAP networking, guest init, SSH with the session's keys.
 *
 * Files under <sessionDir>: root.qcow2 (the writable layer over the image's rootfs.ext4),
 * config.ext4 (the config drive), console.fifo and console.log (serial console and QEMU's
 * errors, capped: console-pipe.ts), qemu.pid.
 * Host resources: the QEMU process (named <prefix><id>) in the session's netns, whose TAP
 * it opens; netns.ts makes the TAP and its bridge.
 *
 * Confinement: QEMU starts as root only to open its TAP and disks, then drops (-runas) to a
 * uid/gid of the VM's own, leased from the pool (vm-user-pool.ts), which also owns the TAP
 * and the session's disks (0600); it runs in a cgroup of its own with memory, CPU and pids
 * limits (vm-cgroup.ts), under a seccomp filter (qemu-command.ts).
 */
export class QemuRuntime implements Runtime {
  readonly name = 'qemu' as const;
  readonly capabilities: RuntimeCapabilities;
  /** The uids/gids the VMs run under, one each. */
  readonly users: VmUserPool;
  private readonly cgroupVersion: CgroupVersion = hostCgroupVersion();
  /** The VMs this run started or resumed, by session (a pause to disk ends one, its resume starts another). */
  private readonly live = new Map<string, LiveVm>();
  private readonly disk: QemuDiskPause;

  private constructor(
    private readonly names: ResourceNames,
    private readonly settings: QemuSettings,
    readonly accelerator: Accelerator,
    /** Why this accelerator, for the start-up log. */
    readonly acceleratorReason: string,
    private readonly tscKhz: number | undefined,
  ) {
    this.capabilities = {
      networkAttachment: 'tap',
      guestConfiguresNetwork: true,
      // A config drive is copied at boot: the warm pool cannot hand it a new key.
      configDirIsLive: false,
      bootTimeoutMs: settings.bootTimeoutMs ?? DEFAULT_BOOT_TIMEOUT_MS[accelerator],
      hostOnlySources: [],
      sharesHostKernel: false,
      // A virtio-blk drive per volume (qemu-command.ts), found by its serial and mounted by sandbox-init.
      volumes: true,
    };
    this.users = new VmUserPool(vmUserRange(settings.vmUsers ?? {}, names.prefix));
    this.disk = new QemuDiskPause({
      binary: settings.binary,
      socketRoot: this.migrationSockets,
      cgroupVersion: this.cgroupVersion,
      parentCgroup: this.parentCgroup,
      vmName: (id) => names.vm(id),
      users: this.users,
      live: this.live,
      findProcesses: () => findQemuProcesses(names),
      reclaim: (id, dir) => this.reclaim(id, dir),
      describeExit,
      accelerator,
    });
  }

  /** How the VMs run, for the start-up log. */
  /** The VM writes to its own copy of (or an overlay on) the image's ext4: at most that size. */
  writableDiskMiB(image: GuestImage | undefined): number {
    return image ? imageDiskMiB(image) : 0;
  }

  describe(): string {
    return `qemu (${this.accelerator}: ${this.acceleratorReason}), each VM as a uid/gid of its own from ${this.users.range.base}`;
  }

  /** Says so when SBX_TRANSPORT asked for more than TCP, which is what its VMs get. */
  async prepareHost(_sandboxes: number, log: Logger): Promise<void> {
    const transport = this.settings.transport ?? 'tcp';
    const reason = vsockFallbackReason(transport);
    if (reason) log.warn({ transport, reason }, 'QEMU sandboxes are reached over TCP');
  }

  leaseVmUser(cleanup: CleanupStack, record?: RecordResource): Promise<TapOwner> {
    return this.users.lease(cleanup, record);
  }

  /** Where a pause to disk's socket is made: outside the state dir (0700, root's), which the VMs' users cannot enter. */
  private get migrationSockets(): string {
    return `/run/${this.names.prefix}qemu-migrate`;
  }

  /** Every VM's cgroup sits under one parent named after our prefix ("sbx"), as the containers' and jails' do. */
  private get parentCgroup(): string {
    return this.names.prefix.slice(0, -1);
  }

  /** Checks the host and picks the accelerator; throws a RuntimeUnavailableError saying what is missing. */
  static async create(names: ResourceNames, settings: QemuSettings): Promise<QemuRuntime> {
    await QemuRuntime.check(settings);
    let accelerator: Accelerator = 'tcg';
    let reason = 'SBX_QEMU_ACCEL=tcg';
    if (settings.accel !== 'tcg') {
      const kvm = await probeKvm(settings.binary, undefined, { forced: settings.accel === 'kvm' });
      if (kvm.usable) {
        accelerator = 'kvm';
        reason = kvm.reason;
      } else if (settings.accel === 'kvm') {
        throw new RuntimeUnavailableError('qemu', `SBX_QEMU_ACCEL=kvm, but ${kvm.reason}`);
      } else {
        reason = `${kvm.reason}; using TCG (software emulation: boots take ~10-15 s)`;
      }
    }
    const tscKhz = accelerator === 'tcg' ? await hostTscKhz() : undefined;
    return new QemuRuntime(names, settings, accelerator, reason, tscKhz);
  }

  static async check(settings: QemuSettings): Promise<void> {
    for (const [binary, pkg] of [
      [settings.binary, 'qemu-system-x86'],
      [settings.imgBinary, 'qemu-utils'],
    ] as const) {
      const res = await run([binary, '--version'], { allowFailure: true }).catch(() => undefined);
      if (!res || res.exitCode !== 0) {
        throw new RuntimeUnavailableError('qemu', `${binary} was not found: install it with \`apt-get install --no-install-recommends ${pkg}\``);
      }
    }
    if (process.getuid?.() !== 0) {
      throw new RuntimeUnavailableError('qemu', 'it needs root (network namespaces, TAP devices): run the orchestrator as root');
    }
  }

  async start(spec: SandboxSpec, cleanup: CleanupStack): Promise<RunningSandbox> {
    const name = this.names.vm(spec.sessionId);
    const network = attachedNetwork(spec.network);
    const tap = network.tapInterface;
    if (!tap) throw new Error(`the qemu runtime needs a TAP device in ${network.netns} (networkAttachment 'tap')`);
    const rootDisk = path.join(spec.sessionDir, 'root.qcow2');
    const configDrive = path.join(spec.sessionDir, 'config.ext4');
    const pidFile = path.join(spec.sessionDir, 'qemu.pid');
    const limits = spec.consoleLog ?? DEFAULT_CONSOLE_LOG_LIMITS;
    // Released after QEMU is gone (pushed before it): its last words are read.
    const consolePipe = await openConsole(spec.sessionDir, limits.maxBytes);
    await cleanup.push(`console ${name}`, () => consolePipe.close());
    const consoleLogPath = consolePipe.logPath;

    // Leased by the session layer before the network (it owns the TAP); a caller that did
    // not gets one here.
    const user = spec.vmUser ?? (await this.leaseVmUser(cleanup, spec.record));
    await cleanup.push(`root disk ${rootDisk}`, () => rm(rootDisk, { force: true }));
    // A fork starts from its snapshot's disk layer (over the same image); any other VM from an empty one.
    const fork = spec.snapshot && (await readForkInfo(spec.snapshot.dir));
    if (fork && fork.memoryMiB !== spec.memoryMiB)
      throw new Error(`the snapshot's VM has ${fork.memoryMiB} MiB of memory, this orchestrator's ${spec.memoryMiB} MiB`);
    if (spec.snapshot) await copySnapshotDisk(spec.snapshot.dir, rootDisk);
    else await createOverlay(this.settings.imgBinary, spec.image.ext4, rootDisk);
    const rootAuthorizedKeys = await writeRekeyKey(spec);
    await cleanup.push(`config drive ${configDrive}`, () => rm(configDrive, { force: true }));
    const volumes = spec.volumes ?? [];
    await prepareVmVolumes(spec.configDir, volumes, (i) => ({ serial: qemuVolumeSerial(i) }));
    await buildConfigDrive(spec.configDir, configDrive);
    // The writable ones are the VM user's while it runs (QEMU reopens them: drives.ts), root's again after.
    await lendVolumes(spec.sessionDir, volumes, cleanup, spec.record);
    await grantVolumes(volumes, user);
    // The VM's own disks are its user's alone (QEMU opens them as root, but a VMM that
    // reopens one, or anything else running under that uid, finds only its own).
    for (const disk of [rootDisk, configDrive]) {
      await chown(disk, user.uid, user.gid);
      await chmod(disk, 0o600);
    }
    const vmLimits = { memoryMiB: spec.memoryMiB + (this.accelerator === 'tcg' ? TCG_EXTRA_MIB : 0), vcpus: this.settings.smp, pidsMax: QEMU_PIDS_MAX };
    const cgroup = await VmCgroup.create({ version: this.cgroupVersion, parent: this.parentCgroup, name, limits: vmLimits, record: spec.record });
    // Pushed before the VM's stop, so it runs after it: a cgroup with a process cannot go.
    await cleanup.push(`cgroup ${this.parentCgroup}/${name}`, () => cgroup.remove());

    const argv = qemuArgv({
      name,
      accelerator: this.accelerator,
      smp: this.settings.smp,
      memoryMiB: spec.memoryMiB,
      kernel: this.settings.kernel ?? spec.image.kernel,
      initrd: initrdFor(spec.image, this.settings),
      cmdline: guestKernelCmdline({ extra: this.tscKhz ? [`tsc_early_khz=${this.tscKhz}`] : [] }),
      rootDisk: ROOT_DISK_IN_QEMU,
      configDrive,
      volumes: volumesInQemu(volumes),
      tap,
      mac: macAddressFor(name),
      pidFile,
      qmpSocket: qmpSocketOf(spec.sessionDir),
      runAs: `${user.uid}:${user.gid}`,
    });
    // What a resume from disk starts again (disk-state.ts).
    const volumeFiles = writableVolumeFiles(volumes);
    await writeRecipe(spec.sessionDir, { netns: network.netns, argv, limits: vmLimits, logsDir: spec.logsDir, consoleLog: limits, volumeFiles });
    const incoming = [...argv, '-S', '-incoming', 'fd:3'];
    const vm: VmProcess & { stream?: Duplex } = withDrivesOpen(rootDisk, volumeFiles, (fds) =>
      fork
        ? spawnLoggedWithStream('ip', netnsArgv(network.netns, this.settings.binary, incoming), consolePipe, this.settings.binary, fds)
        : spawnInNetns(network.netns, this.settings.binary, argv, consolePipe, fds),
    );
    this.live.set(spec.sessionId, { vm, consolePipe });
    // Stopped first on destroy (pushed last): its disks and TAP are freed only once it is gone.
    await cleanup.push(`qemu ${name}`, async () => {
      this.live.delete(spec.sessionId);
      await vm.stop();
    });
    await cgroup.add(vm.pid);
    const vmConsole = { pipe: consolePipe, spec, limits };
    await waitForPidFile(pidFile, vm, 10_000).catch(async (err: Error) => {
      // QEMU refused to start (a bad option, a missing file): its message is in the log.
      const exit = await settled(vm.exited, 1_000);
      throw await vmStartError(err, vmConsole, exit && describeExit(exit));
    });

    if (fork && spec.snapshot && vm.stream) {
      const qmpSocket = qmpSocketOf(spec.sessionDir);
      await loadForkState(vm, vm.stream, spec.snapshot.dir, qmpSocket, argv);
      spec.step?.('snapshot loaded');
      const keys = await readSessionKeys(spec.sessionDir, spec.configDir);
      await startAndRekeyFork({
        netns: network.netns,
        sessionDir: spec.sessionDir,
        info: fork,
        keys,
        lease: network.lease,
        hostname: spec.hostname,
        mac: macAddressFor(name),
        rootAuthorizedKeys,
        start: async () => void (await qmp(qmpSocket, [{ execute: 'cont' }])),
        connectTimeoutMs: this.accelerator === 'tcg' ? 30_000 : 5_000,
        step: spec.step,
      });
      spec.step?.('fork re-keyed');
    }
    const startTime = processStartTime(vm.pid);
    if (startTime) spec.record?.('process', `${vm.pid}@${startTime}`);
    // A crash: the session dir goes with the session, so the console log is kept elsewhere.
    const exited = vmExited(vm, 'qemu process', describeExit, vmConsole);
    return {
      endpoint: { host: network.lease.guest, port: GUEST_SSH_PORT },
      consoleLogPath,
      pid: vm.pid,
      exited,
      isAlive: () => vm.isAlive(),
      accelerator: this.accelerator,
    };
  }

  snapshotUnavailable(): string | undefined {
    return undefined;
  }

  snapshot(target: PauseTarget, dir: string): Promise<void> {
    return saveSnapshot({ socketRoot: this.migrationSockets }, target, dir);
  }

  /**
   * Memory: the VM stopped in QEMU (QMP `stop`): its vCPUs get no CPU, its RAM is kept. Disk:
   * its state migrated to a file and its QEMU ended; a new QEMU loads it (disk-pause.ts).
   */
  pauseModes(): readonly PauseMode[] {
    return ['memory', 'disk'];
  }

  pauseUnavailable(): string | undefined {
    return undefined;
  }

  pauseStateMaxMiB(memoryMiB: number): number {
    return stateMaxMiB(memoryMiB);
  }

  /** Its writable volumes are QEMU's descriptors, which a migration's hand-over reopens (drives.ts). */
  diskPauseWithVolumes(): boolean {
    return true;
  }

  async pause(target: PauseTarget, mode: PauseMode): Promise<PauseResult> {
    if (mode === 'disk') return this.disk.pause(target);
    await qmp(qmpSocketOf(target.sessionDir), [{ execute: 'stop' }]);
    return { bytes: 0 };
  }

  async resume(target: PauseTarget, mode: PauseMode): Promise<AdoptedSandbox | void> {
    if (mode === 'disk') return this.disk.resume(target);
    await qmp(qmpSocketOf(target.sessionDir), [{ execute: 'cont' }]);
  }

  /** Stopped, or stopped after a migration whose state file was not kept (`cont` runs it again). */
  async isPaused(target: PauseTarget): Promise<boolean> {
    const status = await qmpStatus(qmpSocketOf(target.sessionDir)).catch(() => 'unknown');
    return status === 'paused' || status === 'postmigrate';
  }

  adoptPaused(sessionId: string, sessionDir: string): Promise<PausedOnDisk | undefined> {
    return this.disk.adoptPaused(sessionId, sessionDir);
  }

  async list(): Promise<string[]> {
    return [...new Set((await findQemuProcesses(this.names)).map((p) => p.sessionId))];
  }

  /** A VM of an earlier run, if its QEMU is still running. */
  async adopt(
    sessionId: string,
    sessionDir: string,
    endpoint: GuestEndpoint | undefined,
    consoleLog: ConsoleLogLimits = DEFAULT_CONSOLE_LOG_LIMITS,
  ): Promise<AdoptedSandbox | undefined> {
    const vm = (await findQemuProcesses(this.names)).find((p) => p.sessionId === sessionId);
    // What a pause or a snapshot killed half-way left: a partial state, a migration socket.
    await Promise.all([removeState(sessionDir, false), rm(path.join(this.migrationSockets, sessionId), { recursive: true, force: true })]);
    return adoptVmm(vm, "VM's qemu process", this.users, endpoint, sessionDir, consoleLog, () => this.reclaim(sessionId, sessionDir));
  }

  /** Kills the session's orphaned QEMU (if any), then removes its cgroup, TAP and bridge; frees its uid. */
  async reclaim(sessionId: string, sessionDir: string): Promise<void> {
    await killOrphanVmms(await findQemuProcesses(this.names), sessionId, 'qemu', this.users);
    await returnListedVolumes(sessionDir);
    await removeVmCgroups(this.cgroupVersion, this.parentCgroup, this.names.vm(sessionId));
    await deleteTapBridge(this.names.netns(sessionId));
    await rm(path.join(this.migrationSockets, sessionId), { recursive: true, force: true }); // a pause killed half-way
  }
}

export { qmpSocketOf };

/** "exited with code 0 (the guest powered off or rebooted)", "was killed by SIGKILL", ... */
export function describeExit(exit: VmExit): string {
  if (exit.signal) return `was killed by ${exit.signal}`;
  if (exit.code === 0) return 'exited with code 0 (the guest powered off, rebooted or panicked)';
  if (exit.code === null) return 'could not be started';
  return `exited with code ${exit.code} (QEMU failed; its message is in the console log)`;
}

async function settled<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return Promise.race([promise, sleep(ms, undefined, { ref: false })]);
}
