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
 * - a restart (findCheckpoint): a whole `checkpoint` dir is the truth (any container of the
 *   session is stopped); `checkpoint.restoring` is taken back; a `.partial` one is finished if
 *   criu finished it and the container is gone, else removed.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { isProcessAlive, waitForExit, watchExit } from '../../host/process-watch.js';
import { mountsUnder, unmountAll } from '../../host/mounts.js';
import { removeTreeOnOneMount } from '../../host/remove-tree.js';
import type { GuestLink } from '../../network/netns.js';
import { run } from '../../util/exec.js';
import { DEFAULT_CONSOLE_LOG_LIMITS } from '../console-log.js';
import { openConsole, reattachConsole, type ConsolePipe } from '../console-pipe.js';
import type { AdoptedSandbox, PauseTarget, RunningSandbox } from '../runtime.js';
import type { GuestEndpoint } from '../../transport/index.js';
import {
  directoryBytes,
  dumpContainer,
  readConsoleKey,
  restoreFromImages,
  untilRuncIsDone,
  type CheckpointDeps,
  type DumpTarget,
  type RestoredInit,
} from './criu-run.js';
import { deleteContainer } from './runc.js';

export type { CheckpointDeps } from './criu-run.js';

const DONE = 'checkpoint';
const PARTIAL = 'checkpoint.partial';
const RESTORING = 'checkpoint.restoring';
const MARKER = 'marker.json';

/** What a checkpoint keeps beside criu's images: the console's key in them, when, how big. */
interface CheckpointMarker {
  consoleKey: string;
  since: string;
  bytes: number;
}

/** Dumps the container's processes to disk; on failure it goes on running and the error says why. */
export async function checkpointContainer(deps: CheckpointDeps, target: DumpTarget): Promise<{ bytes: number; since: string }> {
  const { sessionDir } = target;
  const partial = path.join(sessionDir, PARTIAL);
  await rm(partial, { recursive: true, force: true });
  await mkdir(partial, { mode: 0o700 });
  let consoleKey: string;
  try {
    consoleKey = await dumpContainer(deps, target, partial);
  } catch (err) {
    await rm(partial, { recursive: true, force: true });
    throw err;
  }
  return finishCheckpoint(sessionDir, consoleKey);
}

/** The marker written into a whole dump and the dir renamed: from here on the checkpoint is the truth. */
async function finishCheckpoint(sessionDir: string, consoleKey: string): Promise<CheckpointMarker> {
  const partial = path.join(sessionDir, PARTIAL);
  const bytes = await directoryBytes(partial);
  const marker: CheckpointMarker = { consoleKey, since: new Date().toISOString(), bytes };
  await writeFile(path.join(partial, MARKER), JSON.stringify(marker), { mode: 0o600 });
  // Its disk and volumes too: a host reboot while it is paused must find them written (remount.ts).
  await run(['sync', '-f', partial, ...(await mountsUnder(sessionDir))]);
  await rename(partial, path.join(sessionDir, DONE));
  return marker;
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
  await rename(done, restoring);
  try {
    // Readable by its guest users (dumpContainer): a checkpoint of an earlier version was not made so.
    if (((await stat(restoring)).mode & 0o005) !== 0o005) await run(['chmod', '-R', 'u=rwX,go=rX', restoring]);
    const init = await restoreFromImages(deps, { sessionId, sessionDir, images: restoring, consoleKey: marker.consoleKey, consolePipe, network });
    await rm(restoring, { recursive: true, force: true });
    return init;
  } catch (err) {
    // The checkpoint stays the truth.
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
 * of the session found running is stopped), else undefined. A kill -9 of the orchestrator
 * leaves the old state or the new one (docs/pause.md#a-kill-9-on-the-way):
 * - during a pause (`.partial`): the runc it started dumps on and ends the container unless the
 *   dump fails. Once it is done: a container that runs is the truth (the partial goes); one
 *   that is gone left a whole dump, which is finished into the checkpoint (its marker written).
 * - during a resume (`.restoring`): the resume ended only with that dir removed, so a container
 *   it restored (once its runc is done) is stopped and the checkpoint is the truth again.
 */
export async function findCheckpoint(deps: CheckpointDeps, sessionId: string, sessionDir: string): Promise<{ bytes: number; since: string } | undefined> {
  const id = deps.names.container(sessionId);
  // The binds of a restore a crash interrupted (restoreBundle).
  for (const name of (await readdir(deps.names.rootfsRoot).catch(() => [] as string[])).filter((n) => n.startsWith(`${id}.restore-`))) {
    const binds = path.join(deps.names.rootfsRoot, name);
    await unmountAll(await mountsUnder(binds));
    await removeTreeOnOneMount(binds);
  }
  const partial = path.join(sessionDir, PARTIAL);
  const restoring = path.join(sessionDir, RESTORING);
  if (existsSync(partial) || existsSync(restoring)) await untilRuncIsDone(id);
  if (existsSync(partial)) {
    const consoleKey = await dumpFinished(partial);
    if (consoleKey && !(await containerRuns(deps, id))) await finishCheckpoint(sessionDir, consoleKey);
    else await rm(partial, { recursive: true, force: true });
  }
  if (await readMarker(restoring)) {
    await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, id).catch(() => undefined);
    await rename(restoring, path.join(sessionDir, DONE));
  }
  const marker = await readMarker(path.join(sessionDir, DONE));
  if (!marker) return undefined;
  await deleteContainer(deps.settings.runcBin, deps.names.runcRoot, id);
  return { bytes: marker.bytes, since: marker.since };
}

async function containerRuns(deps: CheckpointDeps, id: string): Promise<boolean> {
  const state = await run([deps.settings.runcBin, '--root', deps.names.runcRoot, 'state', id], { allowFailure: true });
  return state.exitCode === 0 && /"status":\s*"(running|paused)"/.test(state.stdout);
}

/** The console's key of a dump criu finished (its own log says so), else undefined. */
async function dumpFinished(images: string): Promise<string | undefined> {
  const log = await readFile(path.join(images, 'dump.log'), 'utf8').catch(() => '');
  if (!/Dumping finished successfully/.test(log)) return undefined;
  return readConsoleKey(images);
}

/** The checkpoint's files, gone (a destroy of a paused session; idempotent). */
export async function removeCheckpoint(sessionDir: string): Promise<void> {
  for (const name of [DONE, PARTIAL, RESTORING]) await rm(path.join(sessionDir, name), { recursive: true, force: true });
}

async function readMarker(dir: string): Promise<CheckpointMarker | undefined> {
  const text = await readFile(path.join(dir, MARKER), 'utf8').catch(() => undefined);
  if (text === undefined) return undefined;
  const marker = JSON.parse(text) as Partial<CheckpointMarker>;
  if (typeof marker.consoleKey !== 'string' || !/^file\[[0-9a-f]+:[0-9a-f]+\]$/.test(marker.consoleKey)) return undefined;
  return { consoleKey: marker.consoleKey, since: String(marker.since), bytes: Number(marker.bytes) || 0 };
}
