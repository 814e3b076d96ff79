/**
 * Pause to disk of a Firecracker VM (docs/pause.md), through its snapshot API (v1.16.1):
 *
 * - pause: `PATCH /vm Paused`, `PUT /snapshot/create` (Full) into files of the session the
 *   VMM can write (disk-state.ts), both fsync'd, then the marker written atomically, then the
 *   VMM ended: the session holds no RAM or CPU. Firecracker flushes the drives when it
 *   snapshots, and the VM has not run since, so its rootfs (left where it is, at the path the
 *   snapshot names) is the disk the snapshot goes with.
 * - resume: a fresh VMM (jailed or not, as at the start), `PUT /snapshot/load` and the resume
 *   (boot/snapshot-steps.ts, as a clone's restore). The marker and files are removed once the
 *   VM is loaded and before it runs: a marker is never beside a VM that has run since.
 * - a restart: a whole marker is the truth (a VMM of the session still found has not run since
 *   the snapshot, and is stopped); no marker, the VMM (paused in memory) is, and any snapshot
 *   files are a pause killed half-way's leftovers, removed.
 */
import { rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { processStartTime, waitForExit } from '../../host/process-watch.js';
import type { ResourceNames } from '../../network/names.js';
import { netnsExists } from '../../network/netns.js';
import { run } from '../../util/exec.js';
import { DEFAULT_CONSOLE_LOG_LIMITS, type ConsoleLogLimits } from '../console-log.js';
import { openConsole, reattachConsole, type ConsolePipe } from '../console-pipe.js';
import type { AdoptedSandbox, PausedOnDisk, PauseResult, PauseTarget, RunningSandbox } from '../runtime.js';
import { removeVmCgroups } from '../vm/cgroups.js';
import { grantListedVolumes } from '../vm/vm-volumes.js';
import { killOrphanVmms, vmExited, vmStartError } from '../vm/vm-common.js';
import { settlesWithin, spawnInNetns, type VmProcess } from '../vm/vm-process.js';
import type { VmUserPool } from '../vm/vm-user-pool.js';
import { FirecrackerClient } from './api/client.js';
import { waitForApiSocket } from './api/wait-for-socket.js';
import { snapshotCreateSteps, snapshotRestoreSteps } from './boot/snapshot-steps.js';
import { runSteps, type VmStep } from './boot/steps.js';
import { pauseFilesOf, readMarker, removePauseFiles, syncedSize, writeMarker, type PauseMarker } from './disk-state.js';
import type { FirecrackerHost } from './host/host-check.js';
import { JAILED_VSOCK_SOCKET } from './jailer/chroot-layout.js';
import type { FirecrackerSettings } from './settings.js';
import { removeInJail } from './jailer/jail-files.js';
import { jailId } from './jailer/jail-id.js';
import { JAILED_API_SOCKET, vmmPidFile } from './jailer/jailer-args.js';
import { SESSION_VSOCK_SOCKET, vsockEndpoint } from './vsock.js';
import { launchJailer } from './vmm/jailed.js';
import { describeVmmExit, findFirecrackerProcesses, stopVmm } from './vmm/vmm-process.js';

/** How long the VMM gets to be gone once the snapshot is written (it is SIGKILLed: nothing of it is needed any more). */
const VMM_EXIT_WAIT_MS = 10_000;

/** A VMM this run started or resumed: its process, its console (which outlives it), and the session's console limits. */
export interface LiveVmm {
  vmm: VmProcess;
  consolePipe: ConsolePipe;
  consoleLog: ConsoleLogLimits;
  logsDir: string;
}

export interface FirecrackerDiskPauseDeps {
  names: ResourceNames;
  /** The binaries (no jailer: Firecracker runs unjailed, development only) and the cgroup version. */
  host: Pick<FirecrackerHost, 'firecrackerBin' | 'jailerBin' | 'cgroupVersion'>;
  settings: Pick<FirecrackerSettings, 'chrootBaseDir' | 'apiTimeoutMs'>;
  /** `<chroot base>/<exec name>`: the jails. */
  jailsDir: string;
  parentCgroup: string;
  users: VmUserPool;
  /** The VMMs this run started or resumed, by session. */
  live: Map<string, LiveVmm>;
  /** The runtime's reclaim: any VMM of the session killed, its jail, cgroups, TAP and bridge removed. */
  reclaim(sessionId: string, sessionDir: string): Promise<void>;
}

export class FirecrackerDiskPause {
  constructor(private readonly deps: FirecrackerDiskPauseDeps) {}

  /** Snapshots the VM to disk and ends its VMM; on failure the VM is left running and the error says why. */
  async pause(target: PauseTarget, apiSocket: string): Promise<PauseResult> {
    const { sessionId, sessionDir, pid } = target;
    const startTime = pid > 0 ? processStartTime(pid) : undefined;
    if (!startTime) throw new Error(`the VM's firecracker process (pid ${pid}) is not running`);
    const jailRoot = this.jailRootOf(sessionId);
    const files = pauseFilesOf(sessionDir, jailRoot);
    const user = jailRoot === undefined ? undefined : await stat(jailRoot).then((s) => ({ uid: s.uid, gid: s.gid }));
    const live = this.deps.live.get(sessionId);
    const api = new FirecrackerClient(apiSocket);
    let marker: PauseMarker;
    try {
      const machine = await api.getMachineConfig();
      const wasPaused = (await api.getInstanceInfo()).state === 'Paused';
      await removePauseFiles(sessionDir, files, false);
      try {
        await runSteps(snapshotCreateSteps(files.vmPaths), api);
        const bytes = await syncedSize(files.hostPaths);
        marker = {
          jailed: jailRoot !== undefined,
          ...(user ? { user } : {}),
          memoryMiB: machine.mem_size_mib,
          vcpus: machine.vcpu_count,
          consoleLog: live?.consoleLog ?? DEFAULT_CONSOLE_LOG_LIMITS,
          logsDir: live?.logsDir ?? '',
          bytes,
          since: new Date().toISOString(),
        };
        await writeMarker(sessionDir, marker);
      } catch (err) {
        await removePauseFiles(sessionDir, files, false);
        // Paused for the snapshot: let it run again (a VMM gone is the watch's to report).
        if (!wasPaused) await api.patchVm({ state: 'Resumed' }).catch(() => undefined);
        throw new Error(`the VM's snapshot could not be written to disk, so the VM goes on running: ${describeError(err)}`, { cause: err });
      }
    } finally {
      api.close();
    }
    // Written, and the VM has not run since: its VMM goes (an exit asked for, not a crash).
    live?.vmm.markStopping();
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
    // Our child (unjailed) is gone once reaped: its `exited` says so; one adopted from an earlier run is watched through /proc.
    if (live) await settlesWithin(live.vmm.exited, VMM_EXIT_WAIT_MS);
    else await waitForExit(pid, startTime, VMM_EXIT_WAIT_MS);
    return { bytes: marker.bytes };
  }

  /** Starts the VM again from its snapshot in a fresh VMM; the snapshot is gone once the VM is loaded. */
  async resume(target: PauseTarget): Promise<AdoptedSandbox> {
    const { sessionId, sessionDir } = target;
    const marker = await readMarker(sessionDir);
    if (!marker) throw new Error(`session ${sessionId} has no saved state to resume from`);
    const jailRoot = marker.jailed ? this.jailRootOf(sessionId) : undefined;
    if (marker.jailed && jailRoot === undefined) throw new Error(`session ${sessionId} was paused jailed, and this runtime runs unjailed`);
    const files = pauseFilesOf(sessionDir, jailRoot);
    const netns = this.deps.names.netns(sessionId);
    // A VM without a NIC had a netns of its own, which a host reboot took: made again (the session's cleanup removes it).
    if (!(await netnsExists(netns))) await run(['ip', 'netns', 'add', netns]);
    const live = this.deps.live.get(sessionId);
    // The console FIFO outlives the VMM: this run's reader goes on, or a restart's reads it again.
    const consolePipe =
      live?.consolePipe ?? (await reattachConsole(sessionDir, marker.consoleLog.maxBytes)) ?? (await openConsole(sessionDir, marker.consoleLog.maxBytes));
    const ownPipe = !live;
    const vmConsole = { pipe: consolePipe, spec: { logsDir: marker.logsDir, sessionId }, limits: marker.consoleLog };
    let vmm: VmProcess | undefined;
    let client: FirecrackerClient | undefined;
    let loaded = false;
    try {
      const launched = await this.launch(target, marker, jailRoot, netns, consolePipe);
      vmm = launched.vmm;
      client = new FirecrackerClient(launched.apiSocket);
      await waitForApiSocket(client, { exited: vmm.exited, timeoutMs: this.deps.settings.apiTimeoutMs });
      const steps = snapshotRestoreSteps({ files: files.vmPaths, vsockUdsPath: launched.vsockUdsPath, advanceClock: true });
      // Loaded, not yet run: from here the VM is the truth, not the files (a restart must not load them again).
      const forget: VmStep = {
        name: 'forget-saved-state',
        run: async () => {
          await removePauseFiles(sessionDir, files, true);
          loaded = true;
        },
      };
      steps.splice(
        steps.findIndex((step) => step.name === 'resume'),
        0,
        forget,
      );
      await runSteps(steps, client);
    } catch (err) {
      if (!loaded) {
        if (vmm) await vmm.stop(500);
        client?.close();
        const said = await vmStartError(err as Error, vmConsole);
        if (ownPipe) await consolePipe.close();
        throw new Error(`the VM could not be started again from its snapshot (kept): ${said.message}`, { cause: err });
      }
      // Loaded but not let run: the session's attach fails it (the snapshot is gone, the VM is the truth).
    }
    const vm = vmm as VmProcess;
    const api = client as FirecrackerClient;
    this.deps.live.set(sessionId, { vmm: vm, consolePipe, consoleLog: marker.consoleLog, logsDir: marker.logsDir });
    const sandbox: RunningSandbox = {
      endpoint: target.endpoint ?? vsockEndpoint(path.join(sessionDir, SESSION_VSOCK_SOCKET)),
      consoleLogPath: consolePipe.logPath,
      pid: vm.pid,
      exited: vmExited(vm, 'firecracker process', describeVmmExit, vmConsole),
      isAlive: () => vm.isAlive(),
      accelerator: 'kvm',
    };
    return {
      sandbox,
      release: async () => {
        try {
          await stopVmm(vm, api, true);
        } finally {
          api.close();
        }
        if (ownPipe) await consolePipe.close();
        if (this.deps.live.get(sessionId)?.vmm === vm) this.deps.live.delete(sessionId);
      },
    };
  }

  /**
   * A restart: a whole marker is the truth (a VMM of the session still found has not run since
   * the snapshot, and is stopped); its uid is held again. Without one, a pause's leftovers go.
   */
  async adoptPaused(sessionId: string, sessionDir: string): Promise<PausedOnDisk | undefined> {
    const marker = await readMarker(sessionDir);
    const jailRoot = this.jailRootOf(sessionId);
    if (!marker) {
      await removePauseFiles(sessionDir, pauseFilesOf(sessionDir, jailRoot), false);
      return undefined;
    }
    await killOrphanVmms(await findFirecrackerProcesses(this.deps.names), sessionId, 'firecracker', this.deps.users);
    const owner = marker.jailed ? marker.user : undefined;
    if (owner) this.deps.users.claim(owner.uid);
    return {
      bytes: marker.bytes,
      since: marker.since,
      ...(owner ? { vmUser: owner } : {}),
      release: async () => {
        await this.deps.reclaim(sessionId, sessionDir);
        if (owner) this.deps.users.release(owner.uid);
      },
    };
  }

  /** A fresh VMM for the load, in the session's netns: through the jailer into the same jail, or unjailed. */
  private async launch(
    target: PauseTarget,
    marker: PauseMarker,
    jailRoot: string | undefined,
    netns: string,
    consolePipe: ConsolePipe,
  ): Promise<{ vmm: VmProcess; apiSocket: string; vsockUdsPath: string }> {
    const { sessionId, sessionDir } = target;
    const id = jailId(this.deps.names.prefix, sessionId);
    const { firecrackerBin, jailerBin } = this.deps.host;
    if (jailRoot === undefined || jailerBin === undefined) {
      const apiSocket = path.join(sessionDir, 'firecracker.socket');
      const vsockUdsPath = path.join(sessionDir, SESSION_VSOCK_SOCKET);
      // Firecracker binds both afresh: the old VMM's socket files would be "address in use".
      await rm(apiSocket, { force: true });
      await rm(vsockUdsPath, { force: true });
      return { vmm: spawnInNetns(netns, firecrackerBin, ['--api-sock', apiSocket, '--id', id], consolePipe), apiSocket, vsockUdsPath };
    }
    // What the jailer and the old VMM left in the jail goes (the jail is the VM user's: nothing
    // in it is followed); the rootfs, config drive and snapshot stay.
    for (const file of [
      'dev',
      JAILED_API_SOCKET,
      JAILED_VSOCK_SOCKET,
      path.basename(firecrackerBin),
      path.relative(jailRoot, vmmPidFile(jailRoot, firecrackerBin)),
    ]) {
      await removeInJail(jailRoot, file);
    }
    await rm(path.join(sessionDir, SESSION_VSOCK_SOCKET), { force: true });
    await removeVmCgroups(this.deps.host.cgroupVersion, this.deps.parentCgroup, id);
    const user = marker.user as { uid: number; gid: number };
    // The snapshot's drives are opened again, as the jail's uid: its volumes handed over again.
    await grantListedVolumes(sessionDir, user);
    const vmm = await launchJailer({
      names: this.deps.names,
      jailerBin,
      firecrackerBin,
      chrootBaseDir: this.deps.settings.chrootBaseDir,
      cgroupVersion: this.deps.host.cgroupVersion,
      parentCgroup: this.deps.parentCgroup,
      id,
      sessionId,
      rootDir: jailRoot,
      user,
      netns,
      limits: { memoryMiB: marker.memoryMiB, vcpus: marker.vcpus },
      consolePipe,
      apiTimeoutMs: this.deps.settings.apiTimeoutMs,
    });
    return { vmm, apiSocket: path.join(jailRoot, JAILED_API_SOCKET), vsockUdsPath: JAILED_VSOCK_SOCKET };
  }

  /** The jail's root of a session (`<jails>/<prefix><id>/root`), or undefined unjailed. */
  private jailRootOf(sessionId: string): string | undefined {
    if (this.deps.host.jailerBin === undefined) return undefined;
    return path.join(this.deps.jailsDir, jailId(this.deps.names.prefix, sessionId), 'root');
  }
}

/** The disk full is said as such: the operator's to fix, not a bug. */
function describeError(err: unknown): string {
  const text = (err as Error).message;
  if (/ENOSPC|No space left/i.test(text)) return `the host's disk is full (${text})`;
  return text;
}
