import { chown, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { deleteContainer, listContainers, runcCreate } from './runc.js';
import path from 'node:path';
import type { Logger } from 'pino';
import type { ContainerSettings } from './settings.js';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import type { ResourceNames } from '../../network/names.js';
import { moveIntoNetnsOf } from '../../network/netns.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { run } from '../../util/exec.js';
import type { GuestEndpoint } from '../../transport/index.js';
import { adoptedProcess } from '../adopt-process.js';
import { controlSocketOf, startControlSocket } from './control-socket.js';
import { DEFAULT_CONSOLE_LOG_LIMITS, keepConsoleLog, type ConsoleLogLimits } from '../console-log.js';
import { openConsole, type ConsolePipe } from '../console-pipe.js';
import { freezeCgroup, freezerLayout, isCgroupFrozen, thawCgroup } from '../../host/freezer.js';
import { criuUnavailable } from './criu-check.js';
import { checkpointContainer, findCheckpoint, removeCheckpoint, resumeFromCheckpoint, type CheckpointDeps } from './checkpoint.js';
import {
  type PauseMode,
  type PauseResult,
  type PausedOnDisk,
  type PauseTarget,
  type AdoptedSandbox,
  type ExitInfo,
  type RunningSandbox,
  type Runtime,
  type RuntimeCapabilities,
  type SandboxSpec,
} from '../runtime.js';
import { blockIoAvailable, deviceNumbers } from './block-io.js';
import { mountIdmapped } from './idmapped-mount.js';
import { allowSshPort, limitUserNamespace, logSandboxLimits, raiseHostInotifyLimits } from './namespace-limits.js';
import { ociSpec } from './oci-spec.js';
import { mountsUnder, unmount, unmountAll } from '../../host/mounts.js';
import { mountOverlay } from './overlay.js';
import { allSettledOrThrow, removeRootfs } from './rootfs.js';
import { processStartTime, waitForExit, watchExit } from '../../host/process-watch.js';
import { layerTemplate, mountWritableLayer } from './writable-layer.js';
import { mountVolumes, volumeMountPoints } from './volume-mounts.js';
import { mountPointsOf, recordMounts, remountMissing } from './remount.js';
import { readContainerSnapshot, snapshotContainer, type ContainerSnapshot } from './snapshot.js';
import { guestUidsOf } from './guest-uids.js';
import { SessionIdRanges } from './session-ids.js';
import { forkLayer, restoreFork, writeMachineId } from './fork.js';

/**
 * The container runtime: each sandbox an OCI container run by runc, with its own user namespace
 * (a host id range: guest root is not host root), pid, mount, uts, ipc, cgroup and network
 * namespaces, an overlay of the shared image rootfs, dropped capabilities, an allow-list
 * seccomp profile, memory (no swap), CPU, pids, I/O and inotify limits of its own.
 *
 * Files under <sessionDir>: bundle/config.json, layer.ext4 (its disk, loop-mounted at overlay/),
 * image/ and config-view/ (idmapped, read-only views of the image rootfs and the config dir),
 * console.fifo and console.log (capped), checkpoint/ (a pause to disk: checkpoint.ts). The
 * overlay (its root) is mounted at /run/<prefix>rootfs/<container>, where its root can reach it.
 */
export class ContainerRuntime implements Runtime {
  readonly name = 'container' as const;
  readonly capabilities: RuntimeCapabilities = {
    // The netns end of the veth is the container's eth0, configured by the host.
    networkAttachment: 'veth',
    guestConfiguresNetwork: false,
    // The config dir is bind-mounted as a directory (oci-spec.ts): renames in it show through.
    configDirIsLive: true,
    bootTimeoutMs: 0,
    hostOnlySources: [],
    sharesHostKernel: true,
    volumes: true,
    diskPauseEndsConnection: true,
  };

  private readonly freezer = freezerLayout(); // none: no memory pause
  /** Why CRIU (disk pause) cannot run here, found by prepareHost (criu-check.ts); undefined: it can. */
  private criuReason: string | undefined = 'CRIU was not checked on this host';
  /** The console readers of the containers this run started, by session (a resume from disk goes on with it). */
  private readonly consoles = new Map<string, ConsolePipe>();
  /** Tells the exit watch of a container this run started that its init's exit is a checkpoint, no crash. */
  private readonly checkpointing = new Map<string, (yes: boolean) => void>();
  private readonly criu: CheckpointDeps;
  /** Each session's host id range (session-ids.ts). */
  private readonly idRanges: SessionIdRanges;

  constructor(
    private readonly names: ResourceNames,
    private readonly settings: ContainerSettings,
  ) {
    this.criu = { names, settings };
    this.idRanges = new SessionIdRanges(settings, names.prefix);
    // Any socket asked for (`unix`, `vsock`, `auto`): runc can hand any container its Unix socket (control-socket.ts).
    if (settings.transport && settings.transport !== 'tcp') this.capabilities = { ...this.capabilities, controlTransport: 'unix' };
  }

  /** How the containers run, for the start-up log. */
  writableDiskMiB(): number {
    return this.settings.diskMiB;
  }

  describe(): string {
    return `container (runc, a user namespace and ${this.settings.diskMiB} MiB writable disk each)`;
  }

  /** Host-wide settings for `sandboxes` sandboxes at most, said in the start-up log. */
  async prepareHost(sandboxes: number, log: Logger): Promise<void> {
    await raiseHostInotifyLimits(sandboxes, this.settings, log);
    this.criuReason = await criuUnavailable(this.settings.criuBin);
    // A sandbox over its Unix control socket is reached through `runc exec`, whose processes criu leaves out.
    if (!this.criuReason && this.capabilities.controlTransport === 'unix')
      this.criuReason = "containers reached over a Unix socket (SBX_TRANSPORT) cannot be checkpointed yet: their socket listener is not the container init's";
    log.info({ memory: this.pauseUnavailable('memory') ?? 'available', disk: this.criuReason }, 'container pause: memory (cgroup freezer) and disk (CRIU)');
    logSandboxLimits(this.settings, this.uidBase, log);
  }

  /** The first host id of this orchestrator's ranges: SBX_CONTAINER_UID_BASE, or one derived from the prefix. */
  get uidBase(): number {
    return this.idRanges.base;
  }

  async start(spec: SandboxSpec, cleanup: CleanupStack): Promise<RunningSandbox> {
    const id = this.names.container(spec.sessionId);
    // A fork (fork.ts): its disk and processes are the snapshot's, given its own ids, keys and address.
    const fork = spec.snapshot && { dir: spec.snapshot.dir, saved: await this.forkSource(spec) };
    const bundle = path.join(spec.sessionDir, 'bundle');
    const rootfs = this.names.containerRootfs(spec.sessionId);
    // The sandbox's own disk (writable-layer.ts): its writes land here and nowhere else. Its
    // image and config dir as its user namespace must see them: owned by its guest root and
    // desktop user, not by host ids it cannot map (see idmapped-mount.ts).
    const { layer, layerFile, imageView, configView } = mountPointsOf(spec.sessionDir);
    const record = spec.record ?? (() => undefined);
    const step = spec.step ?? (() => undefined);
    record('disk', layerFile);
    record('mount', layer);
    await cleanup.push(`writable layer ${layer}`, async () => {
      await unmount(layer);
      await rm(layerFile, { force: true });
    });
    const volumeViews = (spec.volumes ?? []).map((v) => volumeMountPoints(spec.sessionDir, v.name).view);
    const ids = await this.idRanges.lease(spec, cleanup, [imageView, configView, ...volumeViews]);
    record('mount', imageView);
    record('mount', configView);
    // Each tried even if the other fails; one that stays mounted keeps the session dir (session-dir.ts).
    await cleanup.push(`idmapped views of ${spec.sessionId}`, () => unmountAll([configView, imageView]));
    // Independent steps at once: each costs a process or two (tens of ms on a busy host).
    // All settle before a failure is thrown, so the cleanup never races a mount still being made.
    await allSettledOrThrow([
      fork
        ? forkLayer(fork.dir, layerFile, layer, fork.saved.ids, ids)
        : layerTemplate(spec.image.dir, this.settings.diskMiB).then((template) => mountWritableLayer(template, layerFile, layer)),
      mountIdmapped(ids, [
        { source: spec.image.rootfs, target: imageView },
        { source: spec.configDir, target: configView },
      ]),
    ]);
    step('runtime: disk layer and idmapped mounts');
    const volumes = await mountVolumes(spec.sessionDir, spec.volumes ?? [], ids, cleanup, record);
    // The overlay's root directory takes its owner from the upper dir: guest root's.
    const upper = path.join(layer, 'upper');
    await mkdir(upper, { recursive: true, mode: 0o755 });
    await chown(upper, ids.first, ids.first);
    record('mount', rootfs);
    await cleanup.push(`overlay ${rootfs}`, () => removeRootfs(rootfs));
    // Every directory on the way is crossable (0711) by the container's root, a host uid.
    await mkdir(path.dirname(rootfs), { recursive: true, mode: 0o711 });
    await mountOverlay(imageView, upper, path.join(layer, 'work'), rootfs);
    if (fork) await writeMachineId(rootfs, ids);
    step('runtime: overlay');

    await mkdir(bundle, { recursive: true, mode: 0o700 });
    const volumeFiles = (spec.volumes ?? []).map(({ name, file, readOnly }) => ({ name, file, readOnly }));
    await recordMounts(bundle, { imageRootfs: spec.image.rootfs, configDir: spec.configDir, ids, volumes: volumeFiles });
    const config = ociSpec(
      spec,
      {
        rootfs,
        configView,
        cgroupsPath: this.names.cgroup(spec.sessionId),
        ids,
        volumes,
        guestUids: await guestUidsOf(spec.image.rootfs),
        disk: blockIoAvailable() === true ? deviceNumbers((await stat(layer, { bigint: true })).dev) : undefined,
      },
      this.settings,
    );
    await writeFile(path.join(bundle, 'config.json'), JSON.stringify(config, null, 2), { mode: 0o600 });

    // Released after the container is gone (pushed before it): its last words are read.
    const consolePipe = await openConsole(spec.sessionDir, (spec.consoleLog ?? DEFAULT_CONSOLE_LOG_LIMITS).maxBytes);
    this.consoles.set(spec.sessionId, consolePipe);
    await cleanup.push(`console ${id}`, () => consolePipe.close().finally(() => this.consoles.delete(spec.sessionId)));
    const consoleLogPath = consolePipe.logPath;

    let init: { pid: number; startTime: string } | undefined;
    // From here on a container may exist even if `runc create` fails part-way. Destroy returns
    // only once its init is really gone: runc delete signals it, and the kernel then needs a
    // moment to tear the namespaces down.
    await cleanup.push(`container ${id}`, async () => {
      await deleteContainer(this.settings.runcBin, this.names.runcRoot, id, this.names.cgroup(spec.sessionId));
      if (init && !(await waitForExit(init.pid, init.startTime, 10_000))) {
        throw new Error(`container init ${init.pid} is still alive 10 s after it was killed`);
      }
    });
    record('container', path.join(this.names.runcRoot, id));
    step('runtime: bundle');
    const known = (started: { pid: number; startTime: string }) => {
      init = started;
      // Recorded once known: runc made it; the container record above already covers it.
      record('process', `${started.pid}@${started.startTime}`);
    };
    let endpoint: GuestEndpoint | undefined;
    if (fork) {
      if (!this.freezer) throw new Error('a fork needs the cgroup freezer');
      const forkSpec = { spec, snapshotDir: fork.dir, snapshot: fork.saved, ids, consolePipe, freezer: this.freezer };
      endpoint = (await restoreFork(this.criu, forkSpec, known)).endpoint;
      step('runtime: restored from the snapshot');
    } else {
      await this.createAndStart(spec, bundle, consolePipe, known, step);
    }
    if (!init) throw new Error(`container ${id} did not start`);
    const { pid, startTime } = init;
    // Without a NIC its sshd is reached over a socket in the session dir (removed with it);
    // with one, over TCP at its address.
    endpoint ??=
      spec.network.attachment === 'none'
        ? await startControlSocket(this.settings.runcBin, this.names.runcRoot, id, spec.sessionDir)
        : { host: spec.network.lease.guest, port: GUEST_SSH_PORT };
    if (spec.network.attachment === 'none') step('runtime: control socket (runc exec)');
    const watcher = watchExit(pid, startTime);
    let checkpointed = false;
    this.checkpointing.set(spec.sessionId, (yes) => (checkpointed = yes));
    // Stop watching before the container is deleted, so a destroy is not reported as a crash.
    await cleanup.push(`watch ${id}`, () => {
      watcher.stop();
      this.checkpointing.delete(spec.sessionId);
    });
    let alive = true;
    const exited = watcher.exited.then(async (): Promise<ExitInfo> => {
      alive = false;
      const reason = `the container's init (pid ${pid}) exited`;
      if (checkpointed) return { code: null, reason: `${reason}: checkpointed to disk` };
      // A crash (a destroy stops the watcher first): the session dir goes with the session,
      // so the newest of its console is kept elsewhere, as the VM runtimes do.
      await consolePipe.quiet();
      const kept = await keepConsoleLog(consoleLogPath, spec.logsDir, spec.sessionId, spec.consoleLog);
      return { code: null, reason: kept ? `${reason}; console log kept at ${kept}` : reason, consoleLogKeptAt: kept };
    });
    return {
      endpoint,
      consoleLogPath,
      pid,
      exited,
      isAlive: () => alive,
    };
  }

  /** `runc create`, its namespaces limited before any guest program runs, `runc start` while its eth0 moves in. */
  private async createAndStart(
    spec: SandboxSpec,
    bundle: string,
    consolePipe: ConsolePipe,
    known: (init: { pid: number; startTime: string }) => void,
    step: (name: string) => void,
  ): Promise<void> {
    const id = this.names.container(spec.sessionId);
    const pidFile = path.join(spec.sessionDir, 'container.pid');
    await runcCreate(this.settings.runcBin, this.names.runcRoot, id, bundle, pidFile, consolePipe);
    step('runtime: runc create');
    const pid = Number((await readFile(pidFile, 'utf8')).trim());
    const startTime = processStartTime(pid);
    if (!startTime) throw new Error(`container ${id} exited at once; see ${consolePipe.logPath}`);
    known({ pid, startTime });
    await allSettledOrThrow([limitUserNamespace(pid, this.settings), allowSshPort(`/proc/${pid}/ns/net`)]);
    step('runtime: namespaces');
    // Its netns is runc's: the session's eth0 moves in while the guest starts (a move waits ~20 ms of RCU grace periods).
    await allSettledOrThrow([
      run([this.settings.runcBin, '--root', this.names.runcRoot, 'start', id]),
      spec.network.attachment === 'none' ? Promise.resolve() : moveIntoNetnsOf(spec.network, pid),
    ]);
    step('runtime: runc start');
  }

  /** A fork's snapshot, if this host can restore it into this session (fork.ts). */
  private async forkSource(spec: SandboxSpec): Promise<ContainerSnapshot> {
    const why = this.snapshotUnavailable();
    if (why) throw new Error(`a container cannot be forked here: ${why}`);
    const saved = await readContainerSnapshot(spec.snapshot?.dir ?? '');
    if (saved.imageRootfs !== spec.image.rootfs)
      throw new Error(`the template's image has changed since the snapshot was taken (${saved.imageRootfs}): its disk is a layer over the old one`);
    return saved;
  }

  pauseModes(): readonly PauseMode[] {
    return [...(this.freezer ? (['memory'] as const) : []), ...(this.criuReason ? [] : (['disk'] as const))];
  }

  /** Its memory (tmpfs files are charged to it too) and criu's own records. */
  pauseStateMaxMiB(memoryMiB: number): number {
    return memoryMiB + 64;
  }

  pauseUnavailable(mode: PauseMode): string | undefined {
    if (mode === 'disk') return this.criuReason;
    return this.freezer ? undefined : 'the host has no cgroup freezer (cgroup v1 freezer controller or cgroup v2)';
  }

  /** A snapshot saves its processes with CRIU, as a pause to disk does, its cgroup frozen meanwhile (snapshot.ts). */
  snapshotUnavailable(): string | undefined {
    if (this.criuReason) return `a container's processes are saved by CRIU, and ${this.criuReason}`;
    return this.freezer ? undefined : 'the host has no cgroup freezer to hold a container still while it is saved';
  }

  async snapshot(target: PauseTarget, dir: string): Promise<void> {
    const why = this.snapshotUnavailable();
    if (why || !this.freezer) throw new Error(`a container cannot be snapshotted here: ${why}`);
    await snapshotContainer(this.criu, this.freezer, target, dir);
  }

  /** Memory: the container's cgroup frozen (no CPU, its memory kept). Disk: its processes checkpointed (checkpoint.ts). */
  async pause(target: PauseTarget, mode: PauseMode): Promise<PauseResult> {
    const why = this.pauseUnavailable(mode);
    if (why) throw new Error(`container ${mode} pause is not available: ${why}`);
    if (mode === 'disk') {
      const mark = this.checkpointing.get(target.sessionId); // a restored container's watch is its release's
      mark?.(true);
      return checkpointContainer(this.criu, { sessionId: target.sessionId, sessionDir: target.sessionDir, pid: target.pid, freezer: this.freezer }).catch(
        (err: unknown) => {
          mark?.(false);
          throw err;
        },
      );
    }
    if (this.freezer) await freezeCgroup(this.names.cgroup(target.sessionId), this.freezer);
    return { bytes: 0 };
  }

  async resume(target: PauseTarget, mode: PauseMode = 'memory'): Promise<AdoptedSandbox | void> {
    if (mode === 'memory') {
      if (this.freezer) await thawCgroup(this.names.cgroup(target.sessionId), this.freezer);
      return;
    }
    // After a host reboot its mounts are made again (and its id range taken host-wide again) first.
    await remountMissing(target.sessionDir, this.names.containerRootfs(target.sessionId), (ids) => this.idRanges.retake(target, ids));
    return resumeFromCheckpoint(this.criu, target, this.consoles.get(target.sessionId));
  }

  /** Its volumes' mounts are bound into it by path and restored as such (checkpoint.ts). */
  diskPauseWithVolumes(): boolean {
    return true;
  }

  /** A restart: the session's checkpoint, if a whole one is there (checkpoint.ts). */
  async adoptPaused(sessionId: string, sessionDir: string): Promise<PausedOnDisk | undefined> {
    const found = await findCheckpoint(this.criu, sessionId, sessionDir);
    if (!found) return undefined;
    return { ...found, release: () => this.reclaim(sessionId, sessionDir).then(() => removeCheckpoint(sessionDir)) };
  }

  async isPaused(target: PauseTarget): Promise<boolean> {
    return this.freezer ? isCgroupFrozen(this.names.cgroup(target.sessionId), this.freezer) : false;
  }

  list(): Promise<string[]> {
    return listContainers(this.settings.runcBin, this.names);
  }

  /** A container of an earlier run, if runc still has it running. */
  async adopt(
    sessionId: string,
    sessionDir: string,
    endpoint: GuestEndpoint | undefined,
    consoleLog: ConsoleLogLimits = DEFAULT_CONSOLE_LOG_LIMITS,
  ): Promise<AdoptedSandbox | undefined> {
    const res = await run([this.settings.runcBin, '--root', this.names.runcRoot, 'state', this.names.container(sessionId)], { allowFailure: true });
    if (res.exitCode !== 0) return undefined;
    const state = JSON.parse(res.stdout) as { status?: string; pid?: number };
    const startTime = state.pid ? processStartTime(state.pid) : undefined;
    // A paused session's container is frozen: runc says so, and it is adopted as it is.
    if ((state.status !== 'running' && state.status !== 'paused') || !state.pid || !startTime) return undefined;
    const init = { pid: state.pid, startTime };
    // Reached as it was started: over its control socket if it has one, else at its address.
    const reached = (await controlSocketOf(sessionDir)) ?? endpoint;
    if (!reached) return undefined;
    return adoptedProcess("container's init", init, reached, sessionDir, consoleLog, () => this.reclaim(sessionId, sessionDir, init));
  }

  /** Everything of the session's container gone (its init too, when given: waited for). */
  async reclaim(sessionId: string, sessionDir: string, init?: { pid: number; startTime: string }): Promise<void> {
    await deleteContainer(this.settings.runcBin, this.names.runcRoot, this.names.container(sessionId), this.names.cgroup(sessionId));
    if (init && !(await waitForExit(init.pid, init.startTime, 10_000))) throw new Error(`container init ${init.pid} is still alive 10 s after it was killed`);
    await removeRootfs(this.names.containerRootfs(sessionId));
    await unmountAll(await mountsUnder(sessionDir));
    // Only once nothing of it is mounted (unmountAll threw otherwise): its range is free host-wide.
    await this.idRanges.releaseSession(sessionId, sessionDir);
  }
}
