import path from 'node:path';
import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { FsConflictError, MAX_LIST_DEPTH, type FsEntry } from '../files/fs-calls.js';
import { DirectoryWatch, type FsChange } from '../files/fs-watch.js';
import { E2bUnsupportedError } from './errors.js';
import { checkUser, envdPath } from './envd-access.js';
import { abortReason, envdCall, keepalive } from './envd-connect.js';
import { EventQueue } from './event-queue.js';
import {
  type EntryInfoSchema,
  EventType,
  FileType,
  Filesystem,
  type FilesystemEventSchema,
  type WatchDirResponseSchema,
} from './gen/filesystem/filesystem_pb.js';

type FsEventInit = MessageInitShape<typeof FilesystemEventSchema>;
type WatchInit = MessageInitShape<typeof WatchDirResponseSchema>;

/** Watchers (CreateWatcher) of one sandbox, and events each keeps until GetWatcherEvents takes them. */
export interface WatcherTable {
  watchers: Map<string, { watch: DirectoryWatch; events: FsEventInit[]; failed?: string }>;
}
export const MAX_WATCHERS = 16;
const MAX_WATCHER_EVENTS = 1000;
/** Unread watch events (counted by name) a client may leave waiting before its watch ends. */
const WATCH_MAX_QUEUED_BYTES = 1024 * 1024;

const TYPE: Record<FsEntry['type'], FileType> = {
  file: FileType.FILE,
  dir: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  other: FileType.UNSPECIFIED,
};
const EVENT: Record<FsChange['type'], EventType> = { created: EventType.CREATE, modified: EventType.WRITE, removed: EventType.REMOVE };

/** `ls -l`'s permission string of a type and mode bits. */
function permissions(entry: FsEntry): string {
  const bits = parseInt(entry.mode, 8);
  const kind = entry.type === 'dir' ? 'd' : entry.type === 'symlink' ? 'l' : '-';
  let out = kind;
  for (let shift = 6; shift >= 0; shift -= 3) {
    const b = (bits >> shift) & 7;
    out += (b & 4 ? 'r' : '-') + (b & 2 ? 'w' : '-') + (b & 1 ? 'x' : '-');
  }
  return out;
}

/** E2B's EntryInfo of an entry. */
export function entryInfo(entry: FsEntry): MessageInitShape<typeof EntryInfoSchema> {
  const modified = new Date(entry.mtime);
  return {
    name: entry.name,
    type: TYPE[entry.type],
    path: entry.path,
    size: BigInt(entry.size),
    mode: parseInt(entry.mode, 8),
    permissions: permissions(entry),
    owner: '',
    group: '',
    ...(Number.isNaN(modified.getTime()) ? {} : { modifiedTime: timestampFromDate(modified) }),
    ...(entry.target !== undefined ? { symlinkTarget: entry.target } : {}),
  };
}

function changeEvent(dir: string, change: FsChange): FsEventInit {
  return { name: path.posix.relative(dir, change.entry.path), type: EVENT[change.type] };
}

function watchedDir(req: { path: string; recursive: boolean }): string {
  if (req.recursive) throw new E2bUnsupportedError("recursive: watches see a directory's own entries only here");
  return envdPath(req.path);
}

/** E2B's filesystem.Filesystem service (src/e2b/proto/filesystem/filesystem.proto), over SFTP as the guest user. */
export const filesystemService: ServiceImpl<typeof Filesystem> = {
  async stat(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    return { entry: entryInfo(await (await call.fs()).stat(envdPath(req.path))) };
  },

  async makeDir(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const fs = await call.fs();
    const dir = envdPath(req.path);
    const existing = await fs.stat(dir).catch(() => undefined);
    if (existing) throw new FsConflictError(`${dir} already exists`, 'already_exists');
    return { entry: entryInfo(await fs.mkdir(dir)) };
  },

  async move(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const fs = await call.fs();
    return { entry: entryInfo(await fs.move(envdPath(req.source, 'source'), envdPath(req.destination, 'destination'), true)) };
  },

  async listDir(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const depth = req.depth === 0 ? 1 : req.depth;
    if (depth > MAX_LIST_DEPTH) throw new InvalidRequestError(`depth must be a whole number from 1 to ${MAX_LIST_DEPTH}`);
    const listing = await (await call.fs()).list(envdPath(req.path), depth);
    return { entries: listing.entries.map(entryInfo) };
  },

  async remove(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    await (await call.fs()).remove(envdPath(req.path), true);
    return {};
  },

  async *watchDir(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const dir = watchedDir(req);
    const fs = await call.fs();
    call.openStream();
    const queue = new EventQueue<WatchInit>(WATCH_MAX_QUEUED_BYTES);
    const watch = new DirectoryWatch(
      fs,
      dir,
      (change) => {
        const event = changeEvent(dir, change);
        // A client that does not read: the watch ends rather than queue without bound.
        if (!queue.push({ event: { case: 'filesystem', value: event } }, 64 + String(event.name).length))
          queue.end(new ConnectError('the client did not read the events', Code.ResourceExhausted));
      },
      (error) => queue.end(new OrchestratorError('file_not_found', error.message)),
    );
    const onAbort = () => queue.end(abortReason(ctx));
    ctx.signal.addEventListener('abort', onAbort);
    if (ctx.signal.aborted) onAbort(); // gone during the awaits before
    const stopKeepalive = keepalive(ctx, queue, { event: { case: 'keepalive', value: {} } });
    try {
      await watch.start();
      yield { event: { case: 'start', value: {} } };
      yield* queue;
    } finally {
      stopKeepalive();
      ctx.signal.removeEventListener('abort', onAbort);
      watch.stop();
    }
  },

  async createWatcher(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const watchers = await call.watchers();
    if (watchers.watchers.size >= MAX_WATCHERS)
      throw new OrchestratorError('session_process_limit', `the sandbox has ${MAX_WATCHERS} watchers, its limit; remove one`);
    const dir = watchedDir(req);
    const id = crypto.randomUUID();
    const kept: { watch: DirectoryWatch; events: FsEventInit[]; failed?: string } = {
      events: [],
      watch: new DirectoryWatch(
        await call.fs(),
        dir,
        (change) => {
          if (kept.events.length < MAX_WATCHER_EVENTS) kept.events.push(changeEvent(dir, change));
        },
        (error) => (kept.failed = error.message),
      ),
    };
    await kept.watch.start();
    // Again after the awaits: watchers made at the same time all passed the first check.
    if (watchers.watchers.size >= MAX_WATCHERS) {
      kept.watch.stop();
      throw new OrchestratorError('session_process_limit', `the sandbox has ${MAX_WATCHERS} watchers, its limit; remove one`);
    }
    watchers.watchers.set(id, kept);
    return { watcherId: id };
  },

  async getWatcherEvents(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const kept = (await call.watchers()).watchers.get(req.watcherId);
    if (!kept) throw new OrchestratorError('not_found', `no watcher ${req.watcherId.slice(0, 64)}`);
    if (kept.failed) throw new OrchestratorError('file_not_found', kept.failed);
    return { events: kept.events.splice(0) };
  },

  async removeWatcher(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const watchers = await call.watchers();
    watchers.watchers.get(req.watcherId)?.watch.stop();
    watchers.watchers.delete(req.watcherId);
    return {};
  },
};
