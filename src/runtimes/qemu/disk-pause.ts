/**
 * Pause to disk of a QEMU VM (docs/pause.md): its RAM, CPU and device state written to the
 * host's disk and its QEMU ended; a resume starts the same VM again from it.
 *
 * QEMU here is 7.2 (no `file:` migration), runs under `-sandbox ...,spawn=deny` (no `exec:`)
 * and as the VM's own uid (-runas): it cannot reach the 0700 session dir, and a descriptor for
 * `fd:` would have to be sent over QMP with SCM_RIGHTS, which Node cannot do. So the pause is a
 * migration to a `unix:` socket the orchestrator listens on, in a directory only the VM's own
 * user can enter (`<socketRoot>/<sessionId>`, its parent root's and 0711), and what arrives is
 * streamed, capped and gzip'd, into the state file (disk-state.ts).
 *
 * The migration is live, with a 10 ms downtime limit: nearly all of the RAM is sent while the
 * VM runs and its disks are still its own, and only the last pages and the devices' state once
 * QEMU has stopped it and handed its disks over. (Stopped first, QEMU 7.2 sends everything in
 * that last phase, and a failure there, the disk full, leaves its disks unable to be handed
 * over again: every later pause to disk of the VM failed, "bdrv_inactivate_all() failed".)
 * A VM whose memory changes faster than it is sent is stopped after CONVERGE_MS: the rest then
 * goes in one pass. A migration that fails (the disk full, the socket gone with a killed
 * orchestrator) leaves the VM running, or stopped, and `cont` lets it run again.
 *
 * The resume starts QEMU with the same argv plus `-S -incoming fd:3`, fd 3 a socket of ours at
 * spawn, feeds it the state, waits for QEMU to say `paused` (loaded), removes the state file,
 * and only then `cont`s it: a whole state file is never beside a VM that has run since it was
 * written, so a restart that finds one trusts it (adoptPaused) and stops any QEMU it finds.
 */
import { chmod, chown, mkdir, rm } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { processStartTime, waitForExit } from '../../host/process-watch.js';
import { consoleLogTail } from '../console-log.js';
import { consoleLogPathOf, openConsole, reattachConsole, type ConsolePipe } from '../console-pipe.js';
import type { AdoptedSandbox, PausedOnDisk, PauseResult, PauseTarget, RunningSandbox } from '../runtime.js';
import { killOrphanVmms, vmExited } from '../vm/vm-common.js';
import type { CgroupVersion } from '../vm/cgroups.js';
import { VmCgroup } from '../vm/vm-cgroup.js';
import { netnsArgv, spawnLoggedWithStream, type VmExit, type VmProcess, type VmProcessInfo } from '../vm/vm-process.js';
import type { VmUserPool } from '../vm/vm-user-pool.js';
import { loadState, memoryMiBOf, readRecipe, removeState, runAsOf, savedState, saveState } from './disk-state.js';
import { withDrivesOpen } from './drives.js';
import { grantListedVolumes } from '../vm/vm-volumes.js';
import { waitForPidFile } from './qemu-process.js';
import { qmp, qmpMigration, qmpSocketOf, qmpStatus } from './qmp.js';

/** A migration over a local socket moves about a GiB a second here; a stuck one is given up after this. */
const MIGRATION_TIMEOUT_MS = 180_000;
/** How long the state's writer may go on after QEMU says the migration completed (it closes its socket at once). */
const CLOSE_AFTER_MIGRATION_MS = 30_000;
/** QEMU's default migration bandwidth cap (128 MiB/s) is for networks: a local socket takes it all. */
const MAX_BANDWIDTH_BYTES = 64 * 2 ** 30;
const POLL_MS = 50;
/** The longest the VM's last pages and devices may take once stopped (QEMU's `downtime-limit`, ms). */
const DOWNTIME_LIMIT_MS = 10;
/** A VM still dirtying its memory after this long is stopped, so that the migration ends. */
const CONVERGE_MS = 500;

/** A VM this run started (or resumed): its process, and its console pipe, which outlives it. */
export interface LiveVm {
  vm: VmProcess;
  consolePipe: ConsolePipe;
}

export interface DiskPauseDeps {
  binary: string;
  /** Where the migration sockets are made (a directory per session, the VM's user's). */
  socketRoot: string;
  cgroupVersion: CgroupVersion;
  parentCgroup: string;
  vmName(sessionId: string): string;
  users: VmUserPool;
  /** The VMs this run started or resumed, by session. */
  live: Map<string, LiveVm>;
  findProcesses(): Promise<VmProcessInfo[]>;
  /** The runtime's reclaim: any QEMU of the session killed, its cgroup, TAP and bridge removed. */
  reclaim(sessionId: string, sessionDir: string): Promise<void>;
  describeExit(exit: VmExit): string;
  accelerator: RunningSandbox['accelerator'];
}

/** The most a state stream may hold: the guest's RAM, QEMU's device state and framing. */
export function maxStateBytes(argv: readonly string[]): number {
  return stateMaxMiB(memoryMiBOf(argv)) * 2 ** 20;
}

/** The state of a VM of `memoryMiB`, at most (its RAM, QEMU's overhead, devices), MiB. */
export function stateMaxMiB(memoryMiB: number): number {
  return Math.ceil(memoryMiB * 1.25 + 256);
}

export class QemuDiskPause {
  constructor(private readonly deps: DiskPauseDeps) {}

  /** Writes the VM's state to disk and ends its QEMU; on failure the VM is left running and the error says why. */
  async pause(target: PauseTarget): Promise<PauseResult> {
    const { sessionId, sessionDir, pid } = target;
    const recipe = await readRecipe(sessionDir);
    const owner = runAsOf(recipe.argv);
    const startTime = pid > 0 ? processStartTime(pid) : undefined;
    if (!owner || !startTime) throw new Error(`the VM's QEMU (pid ${pid}) is not running, or was not started as its own user`);
    const qmpSocket = qmpSocketOf(sessionDir);
    const wasRunning = (await qmpStatus(qmpSocket)) === 'running';
    const dir = path.join(this.deps.socketRoot, sessionId);
    const listener = await listenFor(dir, owner).catch(async (err: unknown) => {
      await rm(dir, { recursive: true, force: true });
      throw err;
    });
    let bytes: number;
    try {
      await qmp(qmpSocket, [
        { execute: 'migrate-set-parameters', arguments: { 'max-bandwidth': MAX_BANDWIDTH_BYTES, 'downtime-limit': DOWNTIME_LIMIT_MS } },
        { execute: 'migrate', arguments: { uri: `unix:${listener.socketPath}` } },
      ]);
      const saved = listener.saved(sessionDir, maxStateBytes(recipe.argv));
      // A migration that ends without QEMU ever connecting closes the socket: the save then fails instead of waiting for good.
      const ended = migrationEnd(qmpSocket, MIGRATION_TIMEOUT_MS, CONVERGE_MS).catch((err: unknown) => {
        listener.close();
        throw err;
      });
      // QEMU says the migration completed, yet keeps the socket open (its guest may have taken
      // it over): the save is given a bounded time to end, never waited for for good.
      // A failed migration does not end the race: its socket is closed then, so the save settles too.
      let closeTimer: NodeJS.Timeout | undefined;
      const savedInTime = Promise.race([
        saved,
        ended.then(
          () =>
            new Promise<never>((_, reject) => {
              closeTimer = setTimeout(
                () => reject(new Error(`QEMU said the migration completed but kept its socket open ${CLOSE_AFTER_MIGRATION_MS / 1000} s more`)),
                CLOSE_AFTER_MIGRATION_MS,
              );
            }),
          () => new Promise<never>(() => undefined),
        ),
      ]);
      const [file, migration] = await Promise.allSettled([savedInTime, ended]);
      clearTimeout(closeTimer);
      // The disk's own error first: a disk that filled up is why QEMU saw its socket break.
      if (file.status === 'rejected' && isDiskFull(file.reason)) throw file.reason;
      if (migration.status === 'rejected') throw migration.reason;
      if (file.status === 'rejected') throw file.reason;
      bytes = file.value.bytes;
    } catch (err) {
      listener.close();
      await qmp(qmpSocket, [{ execute: 'migrate_cancel' }]).catch(() => undefined);
      await migrationEnd(qmpSocket, 10_000).catch(() => undefined);
      await removeState(sessionDir, true);
      // Stopped by the migration's end or to converge: let it run again (a QEMU gone is the watch's to report).
      if (wasRunning) await qmp(qmpSocket, [{ execute: 'cont' }]).catch(() => undefined);
      // QEMU says more on its stderr (the console log) than query-migrate does.
      const said = (await consoleLogTail(consoleLogPathOf(sessionDir), 10).catch(() => ''))
        .split('\n')
        .filter((line) => line.startsWith('qemu-system'))
        .slice(-2)
        .join('; ');
      throw new Error(`the VM's state could not be written to disk, so the VM goes on running: ${describeSaveError(err)}${said ? ` (${said})` : ''}`, {
        cause: err,
      });
    } finally {
      listener.close();
      await rm(dir, { recursive: true, force: true });
    }
    // Saved, and the VM has not run since: its QEMU goes (an exit asked for, not a crash).
    this.deps.live.get(sessionId)?.vm.markStopping();
    await qmp(qmpSocket, [{ execute: 'quit' }]).catch(() => undefined);
    if (!(await waitForExit(pid, startTime, 10_000))) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
      await waitForExit(pid, startTime, 5_000);
    }
    return { bytes };
  }

  /** Starts the VM again from its saved state; the state file is gone once it runs. */
  async resume(target: PauseTarget): Promise<AdoptedSandbox> {
    const { sessionId, sessionDir, endpoint } = target;
    if (!endpoint) throw new Error(`session ${sessionId} has no address to reach its VM at`);
    if (!(await savedState(sessionDir))) throw new Error(`session ${sessionId} has no saved state to resume from`);
    const recipe = await readRecipe(sessionDir);
    const live = this.deps.live.get(sessionId);
    // The console FIFO outlives QEMU: this run's reader goes on, or a restart's reads it again.
    const consolePipe =
      live?.consolePipe ?? (await reattachConsole(sessionDir, recipe.consoleLog.maxBytes)) ?? (await openConsole(sessionDir, recipe.consoleLog.maxBytes));
    const ownPipe = !live;
    const name = this.deps.vmName(sessionId);
    const pidFile = path.join(sessionDir, 'qemu.pid');
    const qmpSocket = qmpSocketOf(sessionDir);
    const argv = [...recipe.argv, '-S', '-incoming', 'fd:3'];
    let cgroup: VmCgroup;
    let vm: ReturnType<typeof spawnLoggedWithStream>;
    try {
      cgroup = await VmCgroup.create({ version: this.deps.cgroupVersion, parent: this.deps.parentCgroup, name, limits: recipe.limits });
      await rm(pidFile, { force: true });
      await rm(qmpSocket, { force: true });
      // Its volumes' owners are as at start again (a restart's reconciliation may have given them back).
      const owner = runAsOf(recipe.argv);
      if (owner) await grantListedVolumes(sessionDir, owner);
      vm = withDrivesOpen(path.join(sessionDir, 'root.qcow2'), recipe.volumeFiles, (fds) =>
        spawnLoggedWithStream('ip', netnsArgv(recipe.netns, this.deps.binary, argv), consolePipe, this.deps.binary, fds),
      );
    } catch (err) {
      // Nothing started: the console reader this resume opened goes with it.
      if (ownPipe) await consolePipe.close();
      throw err;
    }
    let loaded = false;
    try {
      await cgroup.add(vm.pid);
      const feeding = loadState(sessionDir, vm.stream, maxStateBytes(recipe.argv));
      feeding.catch(() => undefined); // a QEMU that fails reads no more: its own exit says why
      await waitForPidFile(pidFile, vm, 10_000);
      await untilLoaded(qmpSocket, vm, MIGRATION_TIMEOUT_MS);
      await feeding;
      // From here the VM is the truth, not the file: removed before the VM runs.
      await removeState(sessionDir, true);
      loaded = true;
      await qmp(qmpSocket, [{ execute: 'cont' }]);
    } catch (err) {
      if (!loaded) {
        await vm.stop();
        const tail = await consoleLogTail(consolePipe.logPath, 5).catch(() => '');
        if (ownPipe) await consolePipe.close();
        throw new Error(`the VM could not be started again from its saved state (kept): ${(err as Error).message}${tail ? `:\n${tail}` : ''}`, { cause: err });
      }
      // Loaded but not let run: the session's attach fails it (the state is the VM's now).
    }
    this.deps.live.set(sessionId, { vm, consolePipe });
    const vmConsole = { pipe: consolePipe, spec: { logsDir: recipe.logsDir, sessionId }, limits: recipe.consoleLog };
    const sandbox: RunningSandbox = {
      endpoint,
      consoleLogPath: consolePipe.logPath,
      pid: vm.pid,
      exited: vmExited(vm, 'qemu process', (exit) => this.deps.describeExit(exit), vmConsole),
      isAlive: () => vm.isAlive(),
      accelerator: this.deps.accelerator,
    };
    return {
      sandbox,
      release: async () => {
        await vm.stop();
        if (ownPipe) await consolePipe.close();
        // The session is ending: its entry goes (a later resume would have replaced it).
        if (this.deps.live.get(sessionId)?.vm === vm) this.deps.live.delete(sessionId);
      },
    };
  }

  /**
   * A restart: a whole saved state is the truth (a QEMU of the session still found has not run
   * since it was saved, or loaded, and is stopped); its uid is held again. A partial one is removed.
   */
  async adoptPaused(sessionId: string, sessionDir: string): Promise<PausedOnDisk | undefined> {
    const saved = await savedState(sessionDir);
    if (!saved) {
      await removeState(sessionDir, false);
      return undefined;
    }
    const recipe = await readRecipe(sessionDir);
    await killOrphanVmms(await this.deps.findProcesses(), sessionId, 'qemu', this.deps.users);
    await removeState(sessionDir, false);
    const owner = runAsOf(recipe.argv);
    if (owner) this.deps.users.claim(owner.uid);
    return {
      ...saved,
      ...(owner ? { vmUser: owner } : {}),
      release: async () => {
        await this.deps.reclaim(sessionId, sessionDir);
        if (owner) this.deps.users.release(owner.uid);
      },
    };
  }
}

/** A Unix socket for one migration, that only the VM's own user can reach, taking one connection (exported for its test). */
export async function listenFor(dir: string, owner: { uid: number; gid: number }) {
  const root = path.dirname(dir);
  await mkdir(root, { recursive: true, mode: 0o711 });
  await chmod(root, 0o711);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { mode: 0o700 });
  await chown(dir, owner.uid, owner.gid);
  const socketPath = path.join(dir, 'state.sock');
  const server = net.createServer();
  server.maxConnections = 1;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve());
  });
  server.on('error', () => undefined);
  await chown(socketPath, owner.uid, owner.gid);
  await chmod(socketPath, 0o600);
  let connection: net.Socket | undefined;
  let closed: (err: Error) => void = () => undefined;
  const connected = new Promise<net.Socket>((resolve, reject) => {
    closed = reject;
    server.once('connection', (socket) => {
      connection = socket;
      socket.on('error', () => undefined);
      server.close();
      resolve(socket);
    });
  });
  connected.catch(() => undefined); // nobody may be waiting when it is closed
  return {
    socketPath,
    /** The state, once QEMU has connected and sent it all (QEMU's own failure settles migrationEnd). */
    saved: async (sessionDir: string, maxBytes: number) => saveState(await connected, sessionDir, maxBytes),
    close(): void {
      closed(new Error('the migration socket was closed before QEMU connected'));
      connection?.destroy();
      server.close();
    },
  };
}

/** Waits for the migration to end; resolves if it completed, else throws QEMU's reason. Stops the VM after `convergeMs`. */
export async function migrationEnd(qmpSocket: string, timeoutMs: number, convergeMs = Infinity): Promise<void> {
  const started = Date.now();
  const deadline = started + timeoutMs;
  let stopped = false;
  while (Date.now() < deadline) {
    const { status, error } = await qmpMigration(qmpSocket);
    if (status === 'completed') return;
    if (!stopped && status === 'active' && Date.now() - started > convergeMs) {
      stopped = true;
      await qmp(qmpSocket, [{ execute: 'stop' }]);
    }
    if (status === 'failed' || status === 'cancelled' || status === 'none') throw new Error(`the migration ${status}${error ? `: ${error}` : ''}`);
    await sleep(POLL_MS);
  }
  throw new Error(`the migration did not end within ${timeoutMs} ms`);
}

/** Waits until a QEMU started with `-S -incoming` has loaded its state (it then says `paused`). */
export async function untilLoaded(qmpSocket: string, vm: VmProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!vm.isAlive()) throw new Error('qemu exited while loading the state');
    const status = await qmpStatus(qmpSocket).catch(() => 'unknown');
    if (status === 'paused') return;
    if (status !== 'inmigrate' && status !== 'unknown') throw new Error(`qemu is ${status} after loading the state`);
    await sleep(POLL_MS);
  }
  throw new Error(`qemu did not load the state within ${timeoutMs} ms`);
}

function isDiskFull(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

/** The disk full is said as such: the operator's to fix, not a bug. */
function describeSaveError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC') return "the host's disk is full (ENOSPC)";
  if (code === 'EDQUOT') return "the host's disk quota is used up (EDQUOT)";
  return (err as Error).message;
}
