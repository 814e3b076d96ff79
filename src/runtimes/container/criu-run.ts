/**
 * criu through runc, as the pause to disk (checkpoint.ts) and the snapshots and forks
 * (snapshot.ts, fork.ts) of a container run it: a dump of its processes into an image dir, and
 * a restore of a container from one, with what both need around them (docs/pause.md#containers-and-criu).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chown, mkdir, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { thawCgroup, type FreezerLayout } from '../../host/freezer.js';
import { processStartTime } from '../../host/process-watch.js';
import { unmountAll } from '../../host/mounts.js';
import { removeTreeOnOneMount } from '../../host/remove-tree.js';
import type { ResourceNames } from '../../network/names.js';
import { moveIntoNetnsOf, type GuestLink } from '../../network/netns.js';
import { killGroupAfter, run } from '../../util/exec.js';
import { consoleLogTail } from '../console-log.js';
import { consoleFifoPath, withWriter, type ConsolePipe } from '../console-pipe.js';
import { MAX_GUEST_UIDS } from './guest-uids.js';
import { allowSshPort, limitUserNamespace, userNamespaceHook } from './namespace-limits.js';
import { continueRestored, freezeForDump, releaseStoppedJobs, RESTORE_STOPPED, stopAgain, type ReleasedJob } from './stopped-jobs.js';
import { deleteContainer } from './runc.js';
import type { ContainerSettings } from './settings.js';

/** A dump or restore of a desktop takes well under a second here; a loaded host, more. Past it, runc and its criu are killed. */
const CRIU_TIMEOUT_MS = 120_000;
const CONSOLE_KEY = 'console-key';
const CONSOLE_KEY_FORM = /^file\[[0-9a-f]+:[0-9a-f]+\]$/;

export interface CheckpointDeps {
  names: ResourceNames;
  settings: ContainerSettings;
}

/** The container a dump is of. */
export interface DumpTarget {
  sessionId: string;
  sessionDir: string;
  /** Its init's pid. */
  pid: number;
  /** The host's cgroup freezer (none: criu's own seize only, and a stopped job hangs it). */
  freezer: FreezerLayout | undefined;
}

/**
 * Dumps the processes of the session's container into `images` (made, empty): ended, unless
 * `leaveRunning` (a snapshot: `whileFrozen` then runs before anything of it runs again). Its
 * cgroup is frozen first, at a moment criu can seize every task (stopped-jobs.ts: no vfork
 * parent waiting; its stopped jobs released, and stopped again after a snapshot). Returns
 * criu's name of the console FIFO in the images (the restore's inherit-fd). On failure the
 * container runs on and the error says why.
 */
export async function dumpContainer(
  deps: CheckpointDeps,
  target: DumpTarget,
  images: string,
  leaveRunning = false,
  whileFrozen?: () => Promise<void>,
): Promise<string> {
  const { sessionId, sessionDir, pid, freezer } = target;
  const cgroup = deps.names.cgroup(sessionId);
  const frozen = freezer ? await freezeForDump(cgroup, freezer) : undefined;
  let released: ReleasedJob[] = [];
  let dumped = false;
  try {
    if (frozen) released = await releaseStoppedJobs(frozen.stopped, images);
    const consoleKey = await externalFileKey(pid, consoleFifoPath(sessionDir));
    // Beside the images from the start: a restart finishes a dump this run did not see end (checkpoint.ts).
    await writeFile(path.join(images, CONSOLE_KEY), consoleKey, { mode: 0o600 });
    const options = await criuOptions(sessionDir, 'dump', [`external ${consoleKey}`]);
    const argv = [deps.settings.runcBin, '--criu', criuOf(deps), '--root', deps.names.runcRoot, 'checkpoint', '--image-path', images, '--work-path', images];
    if (leaveRunning) argv.push('--leave-running');
    const res = await run([...argv, deps.names.container(sessionId)], {
      env: criuEnv(options),
      timeoutMs: CRIU_TIMEOUT_MS,
      killGroup: true,
      allowFailure: true,
    });
    if (res.exitCode !== 0) {
      const said = await criuErrors(path.join(images, 'dump.log'));
      throw new Error(`the container's processes could not be saved, so it goes on running: ${said || res.stderr.trim().slice(-1500)}`);
    }
    // Ended (not a snapshot): its pids are nobody's now, and may soon be another process's.
    dumped = true;
    if (leaveRunning) {
      // criu leaves a cgroup it found frozen frozen: nothing of it has run since the dump.
      stopAgain(released);
      await whileFrozen?.();
    }
    // Its images are read from inside it at a restore, by its root and by other guest users (a
    // time namespace is restored by whichever task made it): the guest's own memory, readable
    // (not writable) by its users, reached only through a 0700 dir or the restore's unlisted bind.
    await run(['chmod', '-R', 'u=rwX,go=rX', images]);
    return consoleKey;
  } catch (err) {
    if (!dumped) stopAgain(released);
    throw err;
  } finally {
    // A container the dump ended took its cgroup with it.
    if (freezer) await thawCgroup(cgroup, freezer).catch(() => undefined);
  }
}

/** The console's key a dump wrote beside its images (dumpContainer), if a well-formed one is there. */
export async function readConsoleKey(images: string): Promise<string | undefined> {
  const key = await readFile(path.join(images, CONSOLE_KEY), 'utf8').catch(() => '');
  return CONSOLE_KEY_FORM.test(key) ? key : undefined;
}

/**
 * Waits until no `runc checkpoint` or `runc restore` of container `id` runs: one a killed
 * orchestrator started goes on without it. Only host root's processes of the host's own pid
 * namespace count (a guest's process can be named anything, and must not hold a restart).
 */
export async function untilRuncIsDone(id: string, timeoutMs = CRIU_TIMEOUT_MS): Promise<void> {
  const ours = await readlink('/proc/self/ns/pid');
  const deadline = Date.now() + timeoutMs;
  const running = async (): Promise<boolean> => {
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      // Host root's first: a guest's command line (as long as it likes) is never read.
      const [ns, status] = await Promise.all([readlink(`/proc/${pid}/ns/pid`).catch(() => ''), readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')]);
      if (ns !== ours || !/^Uid:\s+0\s/m.test(status)) continue;
      const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
      if (argv.includes(id) && (argv.includes('checkpoint') || argv.includes('restore'))) return true;
    }
    return false;
  };
  while (await running()) {
    if (Date.now() > deadline) throw new Error(`a runc checkpoint or restore of ${id} still runs after ${timeoutMs} ms`);
    await sleep(100);
  }
}

/** The restored container's init, reached as before; the caller watches it. */
export interface RestoredInit {
  pid: number;
  startTime: string;
}

export interface RestoreRequest {
  sessionId: string;
  sessionDir: string;
  /** criu's images (not changed by the restore: a fork's are a snapshot's). */
  images: string;
  /** The console FIFO's name in them (dumpContainer). */
  consoleKey: string;
  consolePipe: ConsolePipe;
  network: GuestLink;
}

/**
 * `runc restore` of the session's container from its bundle and `images`, its console the
 * session's FIFO (through `consolePipe`), eth0 moved into its new netns and its namespace
 * limits set as at a start, before any of its processes runs (stopped-jobs.ts). On failure
 * no container of it is left and the error says why.
 */
export async function restoreFromImages(deps: CheckpointDeps, req: RestoreRequest): Promise<RestoredInit> {
  const { sessionId, sessionDir } = req;
  const id = deps.names.container(sessionId);
  const config = JSON.parse(await readFile(path.join(sessionDir, 'bundle', 'config.json'), 'utf8')) as OciConfig;
  const rootId = config.linux.uidMappings[0]?.hostID;
  if (rootId === undefined) throw new Error(`session ${sessionId}'s bundle has no user namespace`);
  // criu reopens the console FIFO through /proc/self/fd inside the restored user namespace,
  // and makes its bind mounts from there: the FIFO its root's, the sources where it can reach.
  await chown(consoleFifoPath(sessionDir), rootId, rootId);
  const { bundle, images, release } = await restoreBundle(deps, id, sessionDir, config, req.images);
  const options = await criuOptions(sessionDir, 'restore', ['mntns-compat-mode', `inherit-fd fd[1]:${req.consoleKey}`, RESTORE_STOPPED]);
  const pidFile = path.join(sessionDir, 'container.pid');
  await rm(pidFile, { force: true });
  try {
    await runcRestore(deps, id, images, bundle, pidFile, options, req.consolePipe);
    const pid = Number((await readFile(pidFile, 'utf8')).trim());
    const startTime = processStartTime(pid);
    if (!startTime) throw new Error(`the restored container ${id} exited at once`);
    // Its netns came back empty (but for lo and the listening sockets), and its user namespace
    // without its limits: both set again while every one of its processes is still stopped.
    await Promise.all([limitUserNamespace(pid, deps.settings), allowSshPort(`/proc/${pid}/ns/net`), moveIntoNetnsOf(req.network, pid)]);
    await continueRestored(pid, req.images);
    return { pid, startTime };
  } catch (err) {
    await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, id).catch(() => undefined);
    throw err;
  } finally {
    await release();
  }
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
  { names, settings }: CheckpointDeps,
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
    // Its user namespace's limits before criu remakes anything in it (namespace-limits.ts).
    const hooks = { createRuntime: [userNamespaceHook(settings, MAX_GUEST_UIDS)] };
    await writeFile(path.join(bundle, 'config.json'), JSON.stringify({ ...config, mounts, hooks }), { mode: 0o600 });
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
    // A group of its own: a timeout ends the criu runc started too (run's killGroup).
    const child = withWriter(consolePipe, (fd) => spawn(deps.settings.runcBin, argv, { stdio: ['ignore', fd, fd], env: criuEnv(options), detached: true }));
    killGroupAfter(child, CRIU_TIMEOUT_MS);
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

export async function directoryBytes(dir: string): Promise<number> {
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
