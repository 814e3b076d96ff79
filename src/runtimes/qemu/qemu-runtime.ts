import { rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import type { QemuSettings } from '../../config.js';
import { buildConfigDrive } from '../../guest/config-drive.js';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import { guestKernelCmdline } from '../../guest/kernel-cmdline.js';
import type { ResourceNames } from '../../network/names.js';
import { deleteTapBridge } from '../../network/netns.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { run } from '../../util/exec.js';
import { consoleLogTail, DEFAULT_CONSOLE_LOG_LIMITS, keepConsoleLog, type ConsoleLogLimits } from '../console-log.js';
import { openConsole } from '../console-pipe.js';
import type { GuestEndpoint } from '../../transport/ssh-connection.js';
import { adoptedProcess } from '../adopt-process.js';
import {
  RuntimeUnavailableError,
  type Accelerator,
  type AdoptedSandbox,
  type ExitInfo,
  type RunningSandbox,
  type Runtime,
  type SandboxSpec,
} from '../runtime.js';
import { processStartTime } from '../container/process-watch.js';
import { hostTscKhz, probeKvm } from './accelerator.js';
import { createOverlay } from './overlay-disk.js';
import { macAddressFor, qemuArgv } from './qemu-command.js';
import { killOrphan, spawnInNetns, type VmExit } from '../vm-process.js';
import { findQemuProcesses, waitForPidFile } from './qemu-process.js';

/** QEMU drops root for this user once its disks and TAP are open (every Debian has it). */
const QEMU_USER = 'nobody';

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
 */
export class QemuRuntime implements Runtime {
  readonly name = 'qemu' as const;
  readonly networkAttachment = 'tap' as const;
  readonly bootTimeoutMs: number;

  private constructor(
    private readonly names: ResourceNames,
    private readonly settings: QemuSettings,
    readonly accelerator: Accelerator,
    /** Why this accelerator, for the start-up log. */
    readonly acceleratorReason: string,
    private readonly tscKhz: number | undefined,
  ) {
    this.bootTimeoutMs = settings.bootTimeoutMs ?? DEFAULT_BOOT_TIMEOUT_MS[accelerator];
  }

  /** Checks the host and picks the accelerator; throws a RuntimeUnavailableError saying what is missing. */
  static async create(names: ResourceNames, settings: QemuSettings): Promise<QemuRuntime> {
    await QemuRuntime.check(settings);
    let accelerator: Accelerator = 'tcg';
    let reason = 'SBX_QEMU_ACCEL=tcg';
    if (settings.accel !== 'tcg') {
      const kvm = await probeKvm(settings.binary);
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
    const tap = spec.network.tapInterface;
    if (!tap) throw new Error(`the qemu runtime needs a TAP device in ${spec.network.netns} (networkAttachment 'tap')`);
    const rootDisk = path.join(spec.sessionDir, 'root.qcow2');
    const configDrive = path.join(spec.sessionDir, 'config.ext4');
    const pidFile = path.join(spec.sessionDir, 'qemu.pid');
    const limits = spec.consoleLog ?? DEFAULT_CONSOLE_LOG_LIMITS;
    // Released after QEMU is gone (pushed before it): its last words are read.
    const consolePipe = await openConsole(spec.sessionDir, limits.maxBytes);
    await cleanup.push(`console ${name}`, () => consolePipe.close());
    const consoleLogPath = consolePipe.logPath;

    await cleanup.push(`root disk ${rootDisk}`, () => rm(rootDisk, { force: true }));
    await createOverlay(this.settings.imgBinary, spec.image.ext4, rootDisk);
    await cleanup.push(`config drive ${configDrive}`, () => rm(configDrive, { force: true }));
    await buildConfigDrive(spec.configDir, configDrive);

    const argv = qemuArgv({
      name,
      accelerator: this.accelerator,
      smp: this.settings.smp,
      memoryMiB: spec.memoryMiB,
      kernel: this.settings.kernel ?? spec.image.kernel,
      initrd: this.settings.kernel && !this.settings.initrd ? undefined : (this.settings.initrd ?? spec.image.initrd),
      cmdline: guestKernelCmdline({ extra: this.tscKhz ? [`tsc_early_khz=${this.tscKhz}`] : [] }),
      rootDisk,
      configDrive,
      tap,
      mac: macAddressFor(name),
      pidFile,
      runAs: QEMU_USER,
    });
    const vm = spawnInNetns(spec.network.netns, this.settings.binary, argv, consolePipe);
    // Stopped first on destroy (pushed last): its disks and TAP are freed only once it is gone.
    await cleanup.push(`qemu ${name}`, () => vm.stop());
    await waitForPidFile(pidFile, vm, 10_000).catch(async (err: Error) => {
      // QEMU refused to start (a bad option, a missing file): its message is in the log.
      const exit = await settled(vm.exited, 1_000);
      await consolePipe.quiet();
      const kept = await keepConsoleLog(consoleLogPath, spec.logsDir, spec.sessionId, limits);
      const tail = await consoleLogTail(consoleLogPath, 5);
      throw new Error(
        `${err.message}${exit ? ` (it ${describeExit(exit)})` : ''}${kept ? `; console log kept at ${kept}` : ''}${tail ? `:\n${tail}` : ''}`,
      );
    });

    const startTime = processStartTime(vm.pid);
    if (startTime) spec.record?.('process', `${vm.pid}@${startTime}`);
    const exited = vm.exited.then(async (exit): Promise<ExitInfo> => {
      const reason = `the VM's qemu process (pid ${vm.pid}) ${describeExit(exit)}`;
      if (vm.stopping) return { code: exit.code, reason };
      // A crash: the session dir goes with the session, so keep the console log elsewhere.
      await consolePipe.quiet();
      const kept = await keepConsoleLog(consoleLogPath, spec.logsDir, spec.sessionId, limits);
      return { code: exit.code, reason: kept ? `${reason}; console log kept at ${kept}` : reason, consoleLogKeptAt: kept };
    });
    return {
      endpoint: { host: spec.network.lease.guest, port: GUEST_SSH_PORT },
      consoleLogPath,
      pid: vm.pid,
      exited,
      isAlive: () => vm.isAlive(),
      accelerator: this.accelerator,
    };
  }

  async list(): Promise<string[]> {
    return [...new Set((await findQemuProcesses(this.names)).map((p) => p.sessionId))];
  }

  /** A VM of an earlier run, if its QEMU is still running. */
  async adopt(sessionId: string, sessionDir: string, endpoint: GuestEndpoint, consoleLog: ConsoleLogLimits = DEFAULT_CONSOLE_LOG_LIMITS): Promise<AdoptedSandbox | undefined> {
    const vm = (await findQemuProcesses(this.names)).find((p) => p.sessionId === sessionId);
    if (!vm) return undefined;
    return adoptedProcess("VM's qemu process", vm, endpoint, sessionDir, consoleLog, () => this.reclaim(sessionId, sessionDir));
  }

  /** Kills the session's orphaned QEMU (if any), then removes its TAP and bridge. */
  async reclaim(sessionId: string, sessionDir: string): Promise<void> {
    void sessionDir; // its files go with the session dir, which reconciliation removes
    for (const orphan of await findQemuProcesses(this.names)) {
      if (orphan.sessionId === sessionId) await killOrphan(orphan, 'qemu');
    }
    await deleteTapBridge(this.names.netns(sessionId));
  }
}

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
