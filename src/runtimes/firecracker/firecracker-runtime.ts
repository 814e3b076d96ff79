import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { buildConfigDrive, volumeDiskName } from '../../guest/config-drive.js';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import type { GuestImage } from '../../guest/image/builder.js';
import type { ResourceNames } from '../../network/names.js';
import { deleteTapBridge, type TapOwner } from '../../network/netns.js';
import { readSessionKeys } from '../../transport/ssh-keys.js';
import type { GuestEndpoint } from '../../transport/index.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { DEFAULT_CONSOLE_LOG_LIMITS, type ConsoleLogLimits } from '../console-log.js';
import { openConsole } from '../console-pipe.js';
import {
  RuntimeUnavailableError,
  type AdoptedSandbox,
  type PauseTarget,
  type RecordResource,
  type RunningSandbox,
  type Runtime,
  type RuntimeCapabilities,
  type PreparedGuest,
  type SandboxSpec,
} from '../runtime.js';
import { processStartTime } from '../../host/process-watch.js';
import { adoptVmm, imageDiskMiB, initrdFor, killOrphanVmms, vmExited, vmStartError } from '../vm/vm-common.js';
import type { VmProcess } from '../vm/vm-process.js';
import { FirecrackerClient } from './api/client.js';
import { waitForApiSocket } from './api/wait-for-socket.js';
import { bootSteps } from './boot/boot-steps.js';
import { snapshotRestoreSteps } from './boot/snapshot-steps.js';
import { runSteps } from './boot/steps.js';
import { checkFirecrackerHost, unjailedRefusal, type FirecrackerHost } from './host/host-check.js';
import { removeChroot } from './jailer/apply-chroot.js';
import { removeVmCgroups } from '../vm/cgroups.js';
import { jailedVsockSocket, type ChrootLayout } from './jailer/chroot-layout.js';
import { jailId } from './jailer/jail-id.js';
import { firecrackerPausing } from './vm-pause.js';
import { FirecrackerDiskPause, type LiveVmm } from './disk-pause.js';
import { foundVsockEndpoint, isolatedNetns, linkVsockSocket, vmNic, vsockEndpoint } from './vsock.js';
import { launchUnjailed, type LaunchedVmm } from './vmm/unjailed.js';
import { ensureVmlinux } from './kernel/vmlinux.js';
import type { FirecrackerSettings } from './settings.js';
import { rotateClone, snapshotBaseAddress, type CloneRotation } from './snapshot/clone-rotation.js';
import { rotationSteps } from './ssh-keys/key-rotation.js';
import { buildSnapshotBase } from './snapshot/base-build.js';
import { loadSnapshotBase, snapshotBaseDir, type SnapshotBase } from './snapshot/base-store.js';
import { describeVmmExit, findFirecrackerProcesses, stopVmm } from './vmm/vmm-process.js';
import { VmUserPool, vmUserRange } from '../vm/vm-user-pool.js';
import { prepareVmVolumes, returnListedVolumes } from '../vm/vm-volumes.js';
import { forkSourceOf, restoreFork, writeRekeyKey } from './snapshot/fork.js';
import { removeForkFiles, saveFirecrackerSnapshot } from './snapshot/session-snapshot.js';
import { launchJailedVm, type JailedVmDeps } from './vmm/launch-jailed-vm.js';

/** A started VM and the handles a snapshot base build needs to snapshot it. */
export interface BootedVm {
  sandbox: RunningSandbox;
  client: FirecrackerClient;
  vmm: VmProcess;
  layout?: ChrootLayout;
}

/**
 * The Firecracker runtime: each sandbox a microVM (the image's kernel, a copy of its root, the
 * config drive; a TAP as its NIC, or none over vsock: vsock.ts), jailed unless
 * SBX_FC_JAILER=off (development only). Jail, users, pause, snapshots: docs/firecracker.md.
 */
export class FirecrackerRuntime implements Runtime {
  readonly name = 'firecracker' as const;
  readonly accelerator = 'kvm' as const;
  /** The uids/gids the jailed VMs run under, one each. */
  readonly users: VmUserPool;
  /** Jailed only: each VM's own uid/gid, leased before its network (its TAP is made owned by it). */
  readonly leaseVmUser: ((cleanup: CleanupStack, record?: RecordResource) => Promise<TapOwner>) | undefined;
  readonly capabilities: RuntimeCapabilities;
  /** The VMMs this run started or resumed from disk, by session (a pause to disk ends one, its resume starts another). */
  private readonly live = new Map<string, LiveVmm>();
  /** Ready snapshot bases, by `<image hash>/<width>x<height>` (see prepare). */
  private readonly snapshotBases = new Map<string, SnapshotBase>();

  private constructor(
    private readonly names: ResourceNames,
    private readonly settings: FirecrackerSettings,
    readonly host: FirecrackerHost,
    /** The key rotation of a restored clone: rotateClone, or a test's stand-in for a guest. */
    private readonly rotate: (rotation: CloneRotation) => Promise<void> = rotateClone,
  ) {
    if (!host.jailerBin && settings.jailer !== 'off') throw new RuntimeUnavailableError('firecracker', unjailedRefusal());
    this.users = new VmUserPool(vmUserRange(settings.vmUsers, names.prefix));
    // Pause in memory and to disk (vm-pause.ts, disk-pause.ts).
    const { jailsDir, parentCgroup, users, live } = this;
    const disk = new FirecrackerDiskPause({ names, host, settings, jailsDir, parentCgroup, users, live, reclaim: (id, dir) => this.reclaim(id, dir) });
    Object.assign(this, firecrackerPausing({ prefix: names.prefix, jailsDir: () => (host.jailerBin ? this.jailsDir : undefined) }, disk));
    this.leaseVmUser = host.jailerBin ? (cleanup, record) => this.users.lease(cleanup, record) : undefined;
    const vsock = settings.transport !== undefined && settings.transport !== 'tcp';
    this.capabilities = {
      networkAttachment: 'tap',
      // Sessions without egress get no NIC and are reached over hybrid vsock (vsock.ts).
      controlTransport: vsock ? 'vsock' : 'tcp',
      guestConfiguresNetwork: true,
      configDirIsLive: false,
      bootTimeoutMs: settings.bootTimeoutMs,
      // With snapshots, a clone answers the host from its snapshot base's address during rotation.
      hostOnlySources: settings.snapshots && !vsock ? [snapshotBaseAddress(names.prefix).guest] : [],
      sharesHostKernel: false,
      // A drive per volume (boot-steps.ts), found by its order and mounted by sandbox-init.
      volumes: true,
    };
  }

  /** Checks the host (KVM, binaries, jailer); throws a RuntimeUnavailableError naming everything missing. */
  static async create(names: ResourceNames, settings: FirecrackerSettings): Promise<FirecrackerRuntime> {
    return new FirecrackerRuntime(names, settings, await checkFirecrackerHost(settings));
  }

  /**
   * For a host already checked, or a test that runs the runtime against Firecracker's
   * contract (test/helpers/firecracker/) where KVM is missing.
   */
  static forHost(
    names: ResourceNames,
    settings: FirecrackerSettings,
    host: FirecrackerHost,
    rotate?: (rotation: CloneRotation) => Promise<void>,
  ): FirecrackerRuntime {
    return new FirecrackerRuntime(names, settings, host, rotate);
  }

  /** How the VMs run, for the start-up log. */
  writableDiskMiB(image: GuestImage | undefined): number {
    // its copy of the image's ext4
    return image ? imageDiskMiB(image) : 0;
  }

  /** Forks of a session's own state (docs/snapshots.md, snapshot/session-snapshot.ts and fork.ts): jailed only. */
  snapshotUnavailable(): string | undefined {
    if (!this.host.jailerBin)
      return 'an unjailed Firecracker runtime (SBX_FC_JAILER=off) cannot fork: a fork finds its disks at the jail paths its snapshot names';
    return undefined;
  }

  snapshot(target: PauseTarget, dir: string): Promise<void> {
    const jailRoot = this.host.jailerBin ? path.join(this.jailsDir, jailId(this.names.prefix, target.sessionId), 'root') : undefined;
    return saveFirecrackerSnapshot({ jailRoot }, target, dir);
  }

  describe(): string {
    const jail = this.host.jailerBin
      ? `jailed, each VM as a uid/gid of its own from ${this.users.range.base} (${this.users.range.count} of them), under ${this.settings.chrootBaseDir} (cgroup v${this.host.cgroupVersion})`
      : 'NOT jailed (SBX_FC_JAILER=off: development only)';
    return `firecracker ${this.host.version} (${this.host.firecrackerBin}), ${jail}`;
  }

  async start(spec: SandboxSpec, cleanup: CleanupStack): Promise<RunningSandbox> {
    return (await this.boot(spec, cleanup, spec.snapshot ? undefined : this.snapshotBaseFor(spec))).sandbox;
  }

  /** The snapshot base to restore from, if one is ready (a restored VM gains no device: volumes, or another NIC than its base's, boot cold). */
  private snapshotBaseFor(spec: SandboxSpec): SnapshotBase | undefined {
    if ((spec.volumes?.length ?? 0) > 0) return undefined;
    if ((spec.network.attachment === 'none') !== (this.capabilities.controlTransport === 'vsock')) return undefined;
    const screen = spec.screen ?? this.settings.snapshotBaseScreen;
    return this.snapshotBases.get(`${spec.image.hash}/${screen.width}x${screen.height}`);
  }

  /**
   * Starts a VM: a cold boot, or a restore of `snapshotBase` followed by the key rotation that
   * makes the clone the session's own (snapshot/clone-rotation.ts). Either way, only a VM
   * that answers with the session's keys is returned.
   */
  private async boot(spec: SandboxSpec, cleanup: CleanupStack, snapshotBase?: SnapshotBase): Promise<BootedVm> {
    const id = jailId(this.names.prefix, spec.sessionId);
    const network = vmNic(spec.network, this.capabilities.controlTransport === 'vsock', snapshotBase?.transport),
      tapName = network?.tapInterface;
    const netns = network?.netns ?? (await isolatedNetns(this.names, spec.sessionId, cleanup));
    const configDrive = path.join(spec.sessionDir, 'config.ext4');
    const limits = spec.consoleLog ?? DEFAULT_CONSOLE_LOG_LIMITS;
    // Released after the VMM is gone (pushed before it): its last words are read.
    const consolePipe = await openConsole(spec.sessionDir, limits.maxBytes);
    await cleanup.push(`console ${id}`, () => consolePipe.close());
    const consoleLogPath = consolePipe.logPath;

    await cleanup.push(`config drive ${configDrive}`, () => rm(configDrive, { force: true }));
    const fork = await forkSourceOf(spec, this.host.jailerBin !== undefined);
    // Every session's own rekey key, so that a snapshot of it can be forked (snapshot/fork.ts).
    const rootAuthorizedKeys = await writeRekeyKey(spec);
    await prepareVmVolumes(spec.configDir, spec.volumes ?? [], (i) => ({ disk: volumeDiskName(i) }));
    await buildConfigDrive(spec.configDir, configDrive);
    const { kernel, initrd } = await this.bootFiles(spec.image);
    // The bench prints where a create's time goes (SandboxSpec.step), the restore's steps among them.
    const step = spec.step ?? (() => undefined);
    step('runtime: config drive and boot files');

    const files = { kernel, initrd, configDrive, consolePipe };
    const launched = this.host.jailerBin
      ? await launchJailedVm(this.jailDeps, spec, cleanup, id, netns, files, fork ?? snapshotBase)
      : await launchUnjailed(this.host.firecrackerBin, spec, cleanup, id, netns, files);
    const { vmm } = launched;
    step(this.host.jailerBin ? 'runtime: jailer (cgroups, namespaces, the VMM started)' : 'runtime: VMM process');
    const vmmStart = processStartTime(vmm.pid);
    if (vmmStart) spec.record?.('process', `${vmm.pid}@${vmmStart}`);

    const vmConsole = { pipe: consolePipe, spec, limits };
    const client = new FirecrackerClient(launched.apiSocket);
    let started = false;
    // Pushed after the process, so it runs first: the VM is asked to power off, then killed.
    await cleanup.push(`firecracker ${id} (pid ${vmm.pid})`, async () => {
      try {
        await stopVmm(vmm, client, started);
      } finally {
        client.close();
      }
    });

    try {
      await waitForApiSocket(client, { exited: vmm.exited, timeoutMs: this.settings.apiTimeoutMs });
      step('runtime: VMM answering on its API socket');
      if (fork && network && launched.layout) {
        const jailPaths = launched.layout.snapshot.jailPaths;
        const connectTimeoutMs = Math.max(5_000, Math.min(30_000, this.settings.bootTimeoutMs / 5));
        const restore = { spec, source: fork, client, network, jailPaths, vsockUdsPath: launched.paths.vsockUdsPath, rootAuthorizedKeys, connectTimeoutMs };
        await restoreFork({ ...restore, onStarted: () => void (started = true) });
      } else if (snapshotBase && launched.layout) {
        await runSteps(
          snapshotRestoreSteps({
            files: launched.layout.snapshot.jailPaths,
            tapName,
            vsockUdsPath: launched.paths.vsockUdsPath,
            advanceClock: true,
          }),
          client,
        );
        started = true;
        step('runtime: snapshot/load and resume');
        const session = await readSessionKeys(spec.sessionDir, spec.configDir);
        const onPhase = rotationSteps(spec.step, 'rotation: route to the clone');
        const keys = { snapshotBase: snapshotBase.keys, session, hostname: spec.hostname, rootAuthorizedKeys, onPhase };
        await this.rotate(
          network
            ? { ...keys, at: snapshotBase.address, hostInterface: network.hostInterface, lease: network.lease }
            : { ...keys, endpoint: vsockEndpoint(await this.vsockSocket(launched, spec, cleanup)) },
        );
      } else {
        await runSteps(
          bootSteps({
            ...launched.paths,
            vcpuCount: this.settings.vcpus,
            memoryMiB: spec.memoryMiB,
            tapName,
            guestAddress: network?.lease.guest,
            leaseIndex: network?.lease.index,
          }),
          client,
        );
        started = true;
        step('runtime: boot (configuration and InstanceStart)');
      }
    } catch (err) {
      // Firecracker's own words (a refused file, a TAP it could not open) are in its output.
      throw await vmStartError(err as Error, vmConsole);
    }

    const exited = vmExited(vmm, 'firecracker process', describeVmmExit, vmConsole);
    this.live.set(spec.sessionId, { vmm, consolePipe, consoleLog: limits, logsDir: spec.logsDir });
    await cleanup.push(`live vmm ${id}`, () => void (this.live.get(spec.sessionId)?.vmm === vmm && this.live.delete(spec.sessionId)));
    const sandbox: RunningSandbox = {
      // Over TCP to its address, or over vsock to the socket Firecracker bound (a clone's is known already).
      endpoint: network ? { host: network.lease.guest, port: GUEST_SSH_PORT } : vsockEndpoint(await this.vsockSocket(launched, spec, cleanup)),
      consoleLogPath,
      pid: vmm.pid,
      exited,
      isAlive: () => vmm.isAlive(),
      accelerator: 'kvm',
    };
    return { sandbox, client, vmm, layout: launched.layout };
  }

  /**
   * Once per image, before sessions are served (SBX_FC_SNAPSHOTS=on, jailed only): loads the
   * snapshot base of the image, or builds it. Sessions of the snapshot base's screen size are
   * then restored from it; any failure here leaves them booting cold.
   */
  async prepare(image: GuestImage, guest: PreparedGuest, log: (message: string) => void): Promise<void> {
    if (!this.settings.snapshots) return;
    if (!this.host.jailerBin) {
      log("SBX_FC_SNAPSHOTS=on needs the jailer (every clone must find its disks at the template's paths): booting cold");
      return;
    }
    const screen = this.settings.snapshotBaseScreen;
    const transport = this.capabilities.controlTransport === 'vsock' ? 'vsock' : 'tcp';
    const dir = snapshotBaseDir(image, screen, transport);
    try {
      let snapshotBase = await loadSnapshotBase(dir, image, transport);
      if (!snapshotBase) {
        log(`building the template snapshot of image ${image.hash} (${screen.width}x${screen.height}, ${transport}) in ${dir}`);
        const started = Date.now();
        snapshotBase = await buildSnapshotBase(image, screen, dir, {
          names: this.names,
          users: this.users,
          memoryMiB: this.settings.snapshotBaseMemoryMiB,
          guest,
          bootTimeoutMs: this.capabilities.bootTimeoutMs,
          transport,
          boot: (spec, cleanup) => this.boot(spec, cleanup),
        });
        log(`template snapshot ready in ${Date.now() - started} ms`);
      }
      this.snapshotBases.set(`${image.hash}/${screen.width}x${screen.height}`, snapshotBase);
    } catch (err) {
      log(`could not build the template snapshot (${(err as Error).message}); sessions boot cold`);
    }
  }

  /** The kernel to boot (an ELF vmlinux, unpacked once per image) and its initrd. */
  private async bootFiles(image: GuestImage): Promise<{ kernel: string; initrd?: string }> {
    const kernel = this.settings.kernel ?? (await ensureVmlinux(image.kernel, path.join(path.dirname(image.kernel), 'vmlinux')));
    return { kernel, initrd: initrdFor(image, this.settings) };
  }

  /** The path the host dials for the VM's vsock (vsock.ts: a link in the session dir to the jail's socket), made once. */
  private async vsockSocket(launched: LaunchedVmm, spec: SandboxSpec, cleanup: CleanupStack): Promise<string> {
    if (!launched.layout) return launched.paths.vsockUdsPath; // unjailed: a host path in the session dir already
    launched.vsockHostPath ??= await linkVsockSocket(launched.layout.vsockSocket.hostPath, spec.sessionDir, cleanup);
    return launched.vsockHostPath;
  }

  private get jailDeps(): JailedVmDeps {
    return { names: this.names, settings: this.settings, host: this.host, users: this.users, parentCgroup: this.parentCgroup };
  }

  /** Every VM's cgroup sits under one parent named after our prefix ("sbx"), as the containers' do. */
  private get parentCgroup(): string {
    return this.names.prefix.slice(0, -1);
  }

  /** The jails of this orchestrator's VMs: `<chroot base>/<exec name>/<prefix><id>`. */
  private get jailsDir(): string {
    return path.join(this.settings.chrootBaseDir, path.basename(this.host.firecrackerBin));
  }

  async list(): Promise<string[]> {
    const ids = new Set((await findFirecrackerProcesses(this.names)).map((p) => p.sessionId));
    for (const entry of await readdir(this.jailsDir).catch(() => [] as string[])) {
      const sessionId = this.names.sessionIdOf(entry);
      if (sessionId) ids.add(sessionId);
    }
    return [...ids];
  }

  /**
   * A VM of an earlier run, if its VMM is still running. Its API socket is still there, but
   * nothing more is asked of it: destroying it is killing it (there is no client to send
   * Ctrl-Alt-Del through, and its disk is thrown away anyway).
   */
  async adopt(
    sessionId: string,
    sessionDir: string,
    endpoint: GuestEndpoint | undefined,
    consoleLog: ConsoleLogLimits = DEFAULT_CONSOLE_LOG_LIMITS,
  ): Promise<AdoptedSandbox | undefined> {
    const vmm = (await findFirecrackerProcesses(this.names)).find((p) => p.sessionId === sessionId);
    const jailDir = path.join(this.jailsDir, jailId(this.names.prefix, sessionId));
    // What a snapshot killed half-way left in the jail (its memory's size; the session layer resumes a VM it left paused).
    if (vmm) await removeForkFiles(path.join(jailDir, 'root')).catch(() => undefined);
    // No address: a VM without a NIC, reached over its vsock socket (the session dir's link, or the jail's own).
    const jailSocket = jailedVsockSocket(jailDir);
    const reached = endpoint ?? (vmm && (await foundVsockEndpoint(sessionDir, jailSocket)));
    return adoptVmm(vmm, "VM's firecracker process", this.users, reached, sessionDir, consoleLog, () => this.reclaim(sessionId, sessionDir));
  }

  /** Kills the session's orphaned VMM, then removes its jail, gives its volumes back to root, removes its cgroups, TAP and bridge. Idempotent. */
  async reclaim(sessionId: string, sessionDir: string): Promise<void> {
    await killOrphanVmms(await findFirecrackerProcesses(this.names), sessionId, 'firecracker', this.users);
    const id = jailId(this.names.prefix, sessionId);
    await removeChroot({ jailDir: path.join(this.jailsDir, id) });
    await returnListedVolumes(sessionDir);
    await removeVmCgroups(this.host.cgroupVersion, this.parentCgroup, id);
    await deleteTapBridge(this.names.netns(sessionId));
  }
}
