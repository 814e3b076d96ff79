/**
 * Pause to disk of a container (docs/pause.md#containers-and-criu): its processes saved by
 * CRIU through runc, and started again from there.
 *
 * - pause: `runc checkpoint` into <session>/checkpoint.partial (criu's options in the file
 *   CRIU_CONFIG_FILE names: no network lock, an open TCP connection restored closed, the console
 *   FIFO an external file), the marker written in it, the dir renamed to <session>/checkpoint.
 *   runc then has no container; its overlay, views and named netns (holding eth0) stay.
 * - resume: the dir renamed to checkpoint.restoring, `runc restore --detach` from it, eth0 moved
 *   into the restored netns and its limits set again as at the start, the dir removed.
 * - a restart: a whole `checkpoint` dir is the truth (any container of the session is stopped);
 *   `checkpoint.restoring` is, unless the restored container runs; a `.partial` one goes.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chown, mkdir, readdir, readFile, readlink, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { isProcessAlive, processStartTime, waitForExit, watchExit } from '../../host/process-watch.js';
import { mountsUnder, unmountAll } from '../../host/mounts.js';
import { removeTreeOnOneMount } from '../../host/remove-tree.js';
import type { ResourceNames } from '../../network/names.js';
import { moveIntoNetnsOf, type GuestLink } from '../../network/netns.js';
import { run } from '../../util/exec.js';
import { consoleLogTail, DEFAULT_CONSOLE_LOG_LIMITS } from '../console-log.js';
import { consoleFifoPath, openConsole, reattachConsole, withWriter, type ConsolePipe } from '../console-pipe.js';
import type { AdoptedSandbox, PauseTarget, RunningSandbox } from '../runtime.js';
import type { GuestEndpoint } from '../../transport/index.js';
import { allowSshPort, limitUserNamespace } from './namespace-limits.js';
import { deleteContainer } from './runc.js';
import type { ContainerSettings } from './settings.js';

const DONE = 'checkpoint';
const PARTIAL = 'checkpoint.partial';
const RESTORING = 'checkpoint.restoring';
const MARKER = 'marker.json';
/** A dump or restore of a desktop takes well under a second here; a loaded host, more. */
const CRIU_TIMEOUT_MS = 120_000;

/** What a checkpoint keeps beside criu's images: the console's key in them, when, how big. */
interface CheckpointMarker {
  consoleKey: string;
  since: string;
  bytes: number;
}

export interface CheckpointDeps {
  names: ResourceNames;
  settings: ContainerSettings;
}

/** Dumps the container's processes to disk; on failure it goes on running and the error says why. */
export async function checkpointContainer(deps: CheckpointDeps, sessionId: string, sessionDir: string, pid: number): Promise<{ bytes: number; since: string }> {
  const partial = path.join(sessionDir, PARTIAL);
  await rm(partial, { recursive: true, force: true });
  await mkdir(partial, { mode: 0o700 });
  const consoleKey = await externalFileKey(pid, consoleFifoPath(sessionDir));
  const options = await criuOptions(sessionDir, 'dump', [`external ${consoleKey}`]);
  const id = deps.names.container(sessionId);
  const res = await run(
    [deps.settings.runcBin, '--criu', criuOf(deps), '--root', deps.names.runcRoot, 'checkpoint', '--image-path', partial, '--work-path', partial, id],
    {
      env: criuEnv(options),
      timeoutMs: CRIU_TIMEOUT_MS,
      allowFailure: true,
    },
  );
  if (res.exitCode !== 0) {
    const said = await criuErrors(path.join(partial, 'dump.log'));
    await rm(partial, { recursive: true, force: true });
    throw new Error(`the container's checkpoint could not be written, so it goes on running: ${said || res.stderr.trim().slice(-1500)}`);
  }
  const bytes = await directoryBytes(partial);
  const marker: CheckpointMarker = { consoleKey, since: new Date().toISOString(), bytes };
  await writeFile(path.join(partial, MARKER), JSON.stringify(marker), { mode: 0o600 });
  // Its disk and volumes too: a host reboot while it is paused must find them written (remount.ts).
  await run(['sync', '-f', partial, ...(await mountsUnder(sessionDir))]);
  await rename(partial, path.join(sessionDir, DONE));
  return marker;
}

/** The restored container's init, reached as before; the caller watches it. */
export interface RestoredInit {
  pid: number;
  startTime: string;
}

/**
 * Starts the container again from its checkpoint, its console the session's FIFO (through
 * `consolePipe`), eth0 moved into its new netns: the checkpoint is gone once it runs. On failure
 * the checkpoint is kept (the session stays paused) and the error says why.
 */
export async function restoreContainer(
  deps: CheckpointDeps,
  sessionId: string,
  sessionDir: string,
  network: GuestLink,
  consolePipe: ConsolePipe,
): Promise<RestoredInit> {
  const done = path.join(sessionDir, DONE);
  const restoring = path.join(sessionDir, RESTORING);
  const marker = await readMarker(done);
  if (!marker) throw new Error(`session ${sessionId} has no checkpoint to resume from`);
  const id = deps.names.container(sessionId);
  const config = JSON.parse(await readFile(path.join(sessionDir, 'bundle', 'config.json'), 'utf8')) as OciConfig;
  const rootId = config.linux.uidMappings[0]?.hostID;
  if (rootId === undefined) throw new Error(`session ${sessionId}'s bundle has no user namespace`);
  // criu reopens the console FIFO through /proc/self/fd inside the restored user namespace,
  // and makes its bind mounts from there: the FIFO its root's, the sources where it can reach.
  await chown(consoleFifoPath(sessionDir), rootId, rootId);
  await rename(done, restoring);
  // Its images are read from inside it too, by its root and by other guest users (a time
  // namespace is restored by whichever task made it): the guest's own memory, readable (not
  // writable) by its users, reached only through the session dir (0700) or the restore's unlisted bind.
  await run(['chmod', '-R', 'u=rwX,go=rX', restoring]);
  let restored: { bundle: string; images: string; release: () => Promise<void> };
  try {
    restored = await restoreBundle(deps.names, id, sessionDir, config, restoring);
  } catch (err) {
    await rename(restoring, done);
    throw err;
  }
  const { bundle, images, release } = restored;
  const options = await criuOptions(sessionDir, 'restore', ['mntns-compat-mode', `inherit-fd fd[1]:${marker.consoleKey}`]);
  const pidFile = path.join(sessionDir, 'container.pid');
  await rm(pidFile, { force: true });
  try {
    await runcRestore(deps, id, images, bundle, pidFile, options, consolePipe);
  } catch (err) {
    await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, id).catch(() => undefined);
    await rename(restoring, done);
    throw err;
  } finally {
    await release();
  }
  try {
    const pid = Number((await readFile(pidFile, 'utf8')).trim());
    const startTime = processStartTime(pid);
    if (!startTime) throw new Error(`the restored container ${id} exited at once`);
    // Its netns came back empty (but for lo and the listening sockets), and its user namespace without its limits.
    await Promise.all([limitUserNamespace(pid, deps.settings), allowSshPort(`/proc/${pid}/ns/net`), moveIntoNetnsOf(network, pid)]);
    await rm(restoring, { recursive: true, force: true });
    return { pid, startTime };
  } catch (err) {
    // Not the session's sandbox then: it goes, and the checkpoint stays the truth.
    await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, id).catch(() => undefined);
    await rename(restoring, done);
    throw err;
  }
}

/**
 * A resume from disk: the restore (with the console reader of the session's start, or one of
 * its own after a restart) and the sandbox it gives the session.
 */
export async function resumeFromCheckpoint(deps: CheckpointDeps, target: PauseTarget, own: ConsolePipe | undefined): Promise<AdoptedSandbox> {
  const { sessionId, sessionDir, endpoint, lease } = target;
  if (!endpoint || !lease) throw new Error(`session ${sessionId} has no address to resume at`);
  const link = { netns: deps.names.netns(sessionId), lease };
  const maxBytes = DEFAULT_CONSOLE_LOG_LIMITS.maxBytes;
  const consolePipe = own ?? (await reattachConsole(sessionDir, maxBytes)) ?? (await openConsole(sessionDir, maxBytes));
  try {
    const init = await restoreContainer(deps, sessionId, sessionDir, link, consolePipe);
    return restoredSandbox(deps, sessionId, init, endpoint, consolePipe, !own);
  } catch (err) {
    if (!own) await consolePipe.close();
    throw err;
  }
}

/**
 * The restored container as a session's sandbox: its init watched through /proc (it is no
 * child of ours), released by runc delete while that init lives (a later pause and resume
 * replaces this release with the next restore's: the container's name is then another's);
 * `closeConsole` when the console reader was the resume's own (after a restart), not the
 * session's from its start.
 */
export function restoredSandbox(
  deps: CheckpointDeps,
  sessionId: string,
  init: RestoredInit,
  endpoint: GuestEndpoint,
  consolePipe: ConsolePipe,
  closeConsole: boolean,
): AdoptedSandbox {
  const watcher = watchExit(init.pid, init.startTime);
  let alive = true;
  const exited = watcher.exited.then(() => {
    alive = false;
    return { code: null, reason: `the restored container's init (pid ${init.pid}) exited` };
  });
  const sandbox: RunningSandbox = { endpoint, consoleLogPath: consolePipe.logPath, pid: init.pid, exited, isAlive: () => alive };
  return {
    sandbox,
    release: async () => {
      watcher.stop();
      if (await isProcessAlive(init.pid, init.startTime)) {
        await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, deps.names.container(sessionId), deps.names.cgroup(sessionId));
        if (!(await waitForExit(init.pid, init.startTime, 10_000))) throw new Error(`container init ${init.pid} is still alive 10 s after it was killed`);
      }
      if (closeConsole) await consolePipe.close();
    },
  };
}

/**
 * A restart: the session's checkpoint, if a whole one is there (then the truth: a container
 * of the session found running is stopped), else undefined (a dump killed half-way's files go).
 */
export async function findCheckpoint(deps: CheckpointDeps, sessionId: string, sessionDir: string): Promise<{ bytes: number; since: string } | undefined> {
  await rm(path.join(sessionDir, PARTIAL), { recursive: true, force: true });
  const id = deps.names.container(sessionId);
  // The binds of a restore a crash interrupted (restoreBundle).
  for (const name of (await readdir(deps.names.rootfsRoot).catch(() => [] as string[])).filter((n) => n.startsWith(`${id}.restore-`))) {
    const binds = path.join(deps.names.rootfsRoot, name);
    await unmountAll(await mountsUnder(binds));
    await removeTreeOnOneMount(binds);
  }
  const restoring = path.join(sessionDir, RESTORING);
  if (await readMarker(restoring)) {
    // Killed during a resume: the restored container is the truth once it runs.
    const state = await run([deps.settings.runcBin, '--root', deps.names.runcRoot, 'state', id], { allowFailure: true });
    if (state.exitCode === 0 && /"status":\s*"running"/.test(state.stdout)) {
      await rm(restoring, { recursive: true, force: true });
      return undefined;
    }
    await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, id).catch(() => undefined);
    await rename(restoring, path.join(sessionDir, DONE));
  }
  const marker = await readMarker(path.join(sessionDir, DONE));
  if (!marker) return undefined;
  await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, id);
  return { bytes: marker.bytes, since: marker.since };
}

/** The checkpoint's files, gone (a destroy of a paused session; idempotent). */
export async function removeCheckpoint(sessionDir: string): Promise<void> {
  for (const name of [DONE, PARTIAL, RESTORING]) await rm(path.join(sessionDir, name), { recursive: true, force: true });
}

interface OciConfig {
  mounts: Array<{ destination: string; source: string; type: string }>;
  linux: { uidMappings: Array<{ hostID: number }> };
}

/**
 * The bundle of the restore: the session's, but with every bind source under the session dir
 * (0700, which the restored user namespace cannot cross) bound again under the rootfs dir
 * (0711) for the moment of the restore, and the checkpoint's images too. The container's own
 * mounts outlive these binds.
 */
async function restoreBundle(
  names: ResourceNames,
  id: string,
  sessionDir: string,
  config: OciConfig,
  checkpoint: string,
): Promise<{ bundle: string; images: string; release: () => Promise<void> }> {
  // A name no one can guess: the rootfs dir (0711) can be crossed, not listed.
  const binds = path.join(names.rootfsRoot, `${id}.restore-${randomBytes(12).toString('hex')}`);
  const bundle = path.join(sessionDir, 'restore-bundle');
  await mkdir(binds, { recursive: true, mode: 0o711 });
  await mkdir(bundle, { recursive: true, mode: 0o700 });
  const made: string[] = [];
  const release = async () => {
    await unmountAll(made).catch(() => undefined);
    // Never into a bind still mounted (the images are the session's checkpoint): a restart's findCheckpoint tries again.
    await removeTreeOnOneMount(binds).catch(() => undefined);
    await rm(bundle, { recursive: true, force: true });
  };
  try {
    const mounts = [];
    for (const [i, m] of config.mounts.entries()) {
      if (m.type !== 'bind' || !m.source.startsWith(sessionDir + path.sep)) {
        mounts.push(m);
        continue;
      }
      const target = path.join(binds, String(i));
      await mkdir(target, { mode: 0o711 });
      await run(['mount', '--bind', m.source, target]);
      made.push(target);
      mounts.push({ ...m, source: target });
    }
    await writeFile(path.join(bundle, 'config.json'), JSON.stringify({ ...config, mounts }), { mode: 0o600 });
    const images = path.join(binds, 'images');
    await mkdir(images, { mode: 0o711 });
    await run(['mount', '--bind', checkpoint, images]);
    made.push(images);
    return { bundle, images, release };
  } catch (err) {
    await release();
    throw err;
  }
}

function runcRestore(
  deps: CheckpointDeps,
  id: string,
  images: string,
  bundle: string,
  pidFile: string,
  options: string,
  consolePipe: ConsolePipe,
): Promise<void> {
  // runc's stdout (and so criu's fd 1, which the restored processes' console is given) is the FIFO.
  const argv = ['--criu', criuOf(deps), '--root', deps.names.runcRoot, 'restore', '--detach'];
  argv.push('--image-path', images, '--work-path', images, '--bundle', bundle, '--pid-file', pidFile, id);
  return new Promise((resolve, reject) => {
    const child = withWriter(consolePipe, (fd) =>
      spawn(deps.settings.runcBin, argv, { stdio: ['ignore', fd, fd], env: criuEnv(options), timeout: CRIU_TIMEOUT_MS }),
    );
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) return resolve();
      void Promise.all([criuErrors(path.join(images, 'restore.log')), consoleLogTail(consolePipe.logPath, 5).catch(() => '')]).then(([said, tail]) =>
        reject(new Error(`runc restore ${id} failed (exit ${code}): ${said || tail.slice(-1500)}`)),
      );
    });
  });
}

/** criu's options for one run, in the session dir (root's), for CRIU_CONFIG_FILE. */
async function criuOptions(sessionDir: string, what: 'dump' | 'restore', more: string[]): Promise<string> {
  const file = path.join(sessionDir, `criu-${what}.conf`);
  // No network lock (nothing of the netns is kept but its listening sockets); an open TCP
  // connection (the orchestrator's own SSH one) restored closed.
  await writeFile(file, ['network-lock skip', 'tcp-close', ...more, ''].join('\n'), { mode: 0o600 });
  return file;
}

/** runc's environment, which it hands to criu: a plain PATH and the options file, nothing of ours. */
function criuEnv(options: string): NodeJS.ProcessEnv {
  return { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', CRIU_CONFIG_FILE: options };
}

function criuOf(deps: CheckpointDeps): string {
  return deps.settings.criuBin ?? 'criu';
}

/** criu's name for a file of a mount the container cannot see: `file[<mnt_id>:<inode>]`, both hex. */
async function externalFileKey(pid: number, file: string): Promise<string> {
  for (const fd of ['1', '2', '0']) {
    if ((await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')) !== file) continue;
    const info = await readFile(`/proc/${pid}/fdinfo/${fd}`, 'utf8');
    const mnt = /^mnt_id:\s*(\d+)/m.exec(info)?.[1];
    const ino = /^ino:\s*(\d+)/m.exec(info)?.[1];
    if (mnt && ino) return `file[${Number(mnt).toString(16)}:${BigInt(ino).toString(16)}]`;
  }
  throw new Error(`the container's init (pid ${pid}) has no console on ${file}`);
}

async function readMarker(dir: string): Promise<CheckpointMarker | undefined> {
  const text = await readFile(path.join(dir, MARKER), 'utf8').catch(() => undefined);
  if (text === undefined) return undefined;
  const marker = JSON.parse(text) as Partial<CheckpointMarker>;
  if (typeof marker.consoleKey !== 'string' || !/^file\[[0-9a-f]+:[0-9a-f]+\]$/.test(marker.consoleKey)) return undefined;
  return { consoleKey: marker.consoleKey, since: String(marker.since), bytes: Number(marker.bytes) || 0 };
}

async function directoryBytes(dir: string): Promise<number> {
  const { stdout } = await run(['du', '-sb', dir]);
  return Number(stdout.split('\t')[0]) || 0;
}

/** criu's error lines of a log (its own, in the image dir), for the error a user reads. */
async function criuErrors(log: string): Promise<string> {
  const text = await readFile(log, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => /Error \(/.test(line) && !/RLIMIT_NOFILE/.test(line))
    .slice(0, 3)
    .join('; ');
}
