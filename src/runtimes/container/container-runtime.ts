import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { GUEST_SSH_PORT } from '../../guest/contract.js';
import type { ResourceNames } from '../../network/names.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { run } from '../../util/exec.js';
import type { GuestEndpoint } from '../../transport/ssh-connection.js';
import { adoptedProcess } from '../adopt-process.js';
import { consoleLogTail, DEFAULT_CONSOLE_LOG_LIMITS, keepConsoleLog, type ConsoleLogLimits } from '../console-log.js';
import { openConsole, withWriter, type ConsolePipe } from '../console-pipe.js';
import { RuntimeUnavailableError, type AdoptedSandbox, type ExitInfo, type RunningSandbox, type Runtime, type SandboxSpec } from '../runtime.js';
import { ociSpec } from './oci-spec.js';
import { mountOverlay, mountsUnder, unmount } from './overlay.js';
import { processStartTime, waitForExit, watchExit } from './process-watch.js';
import { diskMiB, layerTemplate, mountWritableLayer } from './writable-layer.js';

const RUNC = process.env.RUNC_BIN || 'runc';

/**
 * The container runtime: each sandbox is an OCI container run by runc, with its own pid,
 * mount, uts, ipc and cgroup namespaces, the session's network namespace, an overlay of the
 * shared image rootfs, dropped capabilities, seccomp, and memory and pids limits.
 *
 * Files under <sessionDir>: bundle/config.json, rootfs/ (the overlay mount point),
 * layer.ext4 (the sandbox's disk, loop-mounted at overlay/, holding upper/ and work/),
 * console.fifo (runc's and the container's stdout and stderr) and console.log (capped).
 */
export class ContainerRuntime implements Runtime {
  readonly name = 'container' as const;
  /** How much each sandbox may write (SBX_DISK_MIB, default 4 GiB). */
  readonly diskMiB = diskMiB();
  /** The config dir is bind-mounted as a directory (oci-spec.ts): renames in it show through. */
  readonly configDirIsLive = true;

  constructor(private readonly names: ResourceNames) {}

  /** Throws a RuntimeUnavailableError saying what to install if runc cannot be used. */
  static async check(): Promise<void> {
    const res = await run([RUNC, '--version'], { allowFailure: true }).catch(() => undefined);
    if (!res || res.exitCode !== 0) {
      throw new RuntimeUnavailableError('container', 'runc was not found: install it with `apt-get install runc` (or set RUNC_BIN)');
    }
    if (process.getuid?.() !== 0) {
      throw new RuntimeUnavailableError('container', 'it needs root (network namespaces, mounts, runc): run the orchestrator as root');
    }
  }

  async start(spec: SandboxSpec, cleanup: CleanupStack): Promise<RunningSandbox> {
    const id = this.names.container(spec.sessionId);
    const bundle = path.join(spec.sessionDir, 'bundle');
    const rootfs = path.join(spec.sessionDir, 'rootfs');
    // The sandbox's own disk (writable-layer.ts): its writes land here and nowhere else.
    const layer = path.join(spec.sessionDir, 'overlay');
    const layerFile = path.join(spec.sessionDir, 'layer.ext4');
    const record = spec.record ?? (() => undefined);
    record('disk', layerFile);
    record('mount', layer);
    await cleanup.push(`writable layer ${layer}`, async () => {
      await unmount(layer);
      await rm(layerFile, { force: true });
    });
    await mountWritableLayer(await layerTemplate(spec.image.dir, this.diskMiB), layerFile, layer);
    record('mount', rootfs);
    await mountOverlay(spec.image.rootfs, path.join(layer, 'upper'), path.join(layer, 'work'), rootfs);
    await cleanup.push(`overlay ${rootfs}`, () => unmount(rootfs));

    await mkdir(bundle, { recursive: true, mode: 0o700 });
    const config = ociSpec(spec, rootfs, this.names.cgroup(spec.sessionId));
    await writeFile(path.join(bundle, 'config.json'), JSON.stringify(config, null, 2), { mode: 0o600 });

    // Released after the container is gone (pushed before it): its last words are read.
    const consolePipe = await openConsole(spec.sessionDir, (spec.consoleLog ?? DEFAULT_CONSOLE_LOG_LIMITS).maxBytes);
    await cleanup.push(`console ${id}`, () => consolePipe.close());
    const consoleLogPath = consolePipe.logPath;

    const pidFile = path.join(spec.sessionDir, 'container.pid');
    let init: { pid: number; startTime: string } | undefined;
    // From here on a container may exist even if `runc run` fails part-way. Destroy returns
    // only once its init is really gone: runc delete signals it, and the kernel then needs a
    // moment to tear the namespaces down.
    await cleanup.push(`container ${id}`, async () => {
      await deleteContainer(this.names.runcRoot, id);
      if (init && !(await waitForExit(init.pid, init.startTime, 10_000))) {
        throw new Error(`container init ${init.pid} is still alive 10 s after it was killed`);
      }
    });
    record('container', path.join(this.names.runcRoot, id));
    await runcRunDetached(this.names.runcRoot, id, bundle, pidFile, consolePipe);

    const pid = Number((await readFile(pidFile, 'utf8')).trim());
    const startTime = processStartTime(pid);
    if (!startTime) throw new Error(`container ${id} exited at once; see ${consoleLogPath}`);
    // Recorded once known: runc made it; the container record above already covers it.
    record('process', `${pid}@${startTime}`);
    init = { pid, startTime };
    const watcher = watchExit(pid, startTime);
    // Stop watching before the container is deleted, so a destroy is not reported as a crash.
    await cleanup.push(`watch ${id}`, () => watcher.stop());
    let alive = true;
    const exited = watcher.exited.then(async (): Promise<ExitInfo> => {
      alive = false;
      const reason = `the container's init (pid ${pid}) exited`;
      // A crash (a destroy stops the watcher first): the session dir goes with the session,
      // so the newest of its console is kept elsewhere, as the VM runtimes do.
      await consolePipe.quiet();
      const kept = await keepConsoleLog(consoleLogPath, spec.logsDir, spec.sessionId, spec.consoleLog);
      return { code: null, reason: kept ? `${reason}; console log kept at ${kept}` : reason, consoleLogKeptAt: kept };
    });
    return {
      endpoint: { host: spec.network.lease.guest, port: GUEST_SSH_PORT },
      consoleLogPath,
      pid,
      exited,
      isAlive: () => alive,
    };
  }

  async list(): Promise<string[]> {
    const ids = new Set<string>();
    const root = this.names.runcRoot;
    const res = await run([RUNC, '--root', root, 'list', '--format', 'json'], { allowFailure: true });
    if (res.exitCode === 0 && res.stdout.trim() && res.stdout.trim() !== 'null') {
      for (const c of JSON.parse(res.stdout) as Array<{ id: string }>) {
        const id = this.names.sessionIdOf(c.id);
        if (id) ids.add(id);
      }
    }
    // runc's state may be gone (e.g. /run was cleared) while its state dir entries linger.
    if (existsSync(root)) {
      for (const name of await readdir(root)) {
        const id = this.names.sessionIdOf(name);
        if (id) ids.add(id);
      }
    }
    return [...ids];
  }

  /** A container of an earlier run, if runc still has it running. */
  async adopt(sessionId: string, sessionDir: string, endpoint: GuestEndpoint, consoleLog: ConsoleLogLimits = DEFAULT_CONSOLE_LOG_LIMITS): Promise<AdoptedSandbox | undefined> {
    const id = this.names.container(sessionId);
    const res = await run([RUNC, '--root', this.names.runcRoot, 'state', id], { allowFailure: true });
    if (res.exitCode !== 0) return undefined;
    const state = JSON.parse(res.stdout) as { status?: string; pid?: number };
    const startTime = state.pid ? processStartTime(state.pid) : undefined;
    if (state.status !== 'running' || !state.pid || !startTime) return undefined;
    const init = { pid: state.pid, startTime };
    return adoptedProcess("container's init", init, endpoint, sessionDir, consoleLog, async () => {
      await deleteContainer(this.names.runcRoot, id);
      if (!(await waitForExit(init.pid, init.startTime, 10_000))) throw new Error(`container init ${init.pid} is still alive 10 s after it was killed`);
      for (const target of await mountsUnder(sessionDir)) await unmount(target);
    });
  }

  async reclaim(sessionId: string, sessionDir: string): Promise<void> {
    await deleteContainer(this.names.runcRoot, this.names.container(sessionId));
    for (const target of await mountsUnder(sessionDir)) await unmount(target);
  }
}

function runcRunDetached(root: string, id: string, bundle: string, pidFile: string, consolePipe: ConsolePipe): Promise<void> {
  // The container inherits runc's stdout and stderr: both are the console FIFO, which the
  // orchestrator copies into the capped log for the container's whole life. runc's own error
  // message lands in the same log, and its end is read back from it on failure.
  return new Promise<void>((resolve, reject) => {
    const child = withWriter(consolePipe, (fd) =>
      spawn(RUNC, ['--root', root, 'run', '--detach', '--bundle', bundle, '--pid-file', pidFile, id], { stdio: ['ignore', fd, fd] }),
    );
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) return resolve();
      consolePipe
        .quiet()
        .then(() => consoleLogTail(consolePipe.logPath, 20))
        .catch(() => '')
        .then((tail) => reject(new Error(`runc run ${id} failed (exit ${code}): ${tail.slice(-1500)}`)));
    });
  });
}

/** Kills and deletes a container; a container that does not exist is not an error. */
async function deleteContainer(root: string, id: string): Promise<void> {
  const res = await run([RUNC, '--root', root, 'delete', '--force', id], { allowFailure: true, timeoutMs: 15_000 });
  if (res.exitCode !== 0 && !/does not exist|not exist|container not found/i.test(res.stderr)) {
    throw new Error(`runc delete ${id}: ${res.stderr.trim()}`);
  }
}

