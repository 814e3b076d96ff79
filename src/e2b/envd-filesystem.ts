import path from 'node:path';
import type { FastifyRequest } from 'fastify';
import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { FsConflictError, MAX_LIST_DEPTH, type FsCalls, type FsEntry } from '../files/fs-calls.js';
import { DirectoryWatch, type FsChange } from '../files/fs-watch.js';
import { type ConnectStream, streamTimers } from './connect-protocol.js';
import { E2bUnsupportedError } from './errors.js';
import { checkUser, envdPath } from './envd-access.js';

/** Watchers (CreateWatcher) of one sandbox, and events each keeps until GetWatcherEvents takes them. */
export interface WatcherTable {
  watchers: Map<string, { watch: DirectoryWatch; events: unknown[]; failed?: string }>;
}
export const MAX_WATCHERS = 16;
const MAX_WATCHER_EVENTS = 1000;
/** Unread watch events a client may leave buffered before its watch ends (as our own watch's SSE). */
const WATCH_MAX_BUFFERED_BYTES = 1024 * 1024;

const TYPE: Record<FsEntry['type'], string> = {
  file: 'FILE_TYPE_FILE',
  dir: 'FILE_TYPE_DIRECTORY',
  symlink: 'FILE_TYPE_SYMLINK',
  other: 'FILE_TYPE_UNSPECIFIED',
};
const EVENT: Record<FsChange['type'], string> = { created: 'EVENT_TYPE_CREATE', modified: 'EVENT_TYPE_WRITE', removed: 'EVENT_TYPE_REMOVE' };

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

/** E2B's EntryInfo (int64 as a string, as proto3's JSON mapping says). */
export function entryInfo(entry: FsEntry): Record<string, unknown> {
  return {
    name: entry.name,
    type: TYPE[entry.type],
    path: entry.path,
    size: String(entry.size),
    mode: parseInt(entry.mode, 8),
    permissions: permissions(entry),
    owner: '',
    group: '',
    modifiedTime: entry.mtime,
    ...(entry.target !== undefined ? { symlinkTarget: entry.target } : {}),
  };
}

function changeEvent(dir: string, change: FsChange): Record<string, unknown> {
  return { name: path.posix.relative(dir, change.entry.path), type: EVENT[change.type] };
}

function watchedDir(message: Record<string, unknown>): string {
  if (message.recursive === true) throw new E2bUnsupportedError("recursive: watches see a directory's own entries only here");
  return envdPath(message.path);
}

/** The calls of E2B's filesystem.Filesystem service (spec/envd/filesystem/filesystem.proto), over SFTP as the guest user. */
export async function filesystemCall(
  method: string,
  message: Record<string, unknown>,
  fs: FsCalls,
  watchers: WatcherTable,
  request: FastifyRequest,
  openStream: () => ConnectStream,
): Promise<unknown> {
  checkUser(request);
  switch (method) {
    case 'Stat':
      return { entry: entryInfo(await fs.stat(envdPath(message.path))) };
    case 'MakeDir': {
      const dir = envdPath(message.path);
      const existing = await fs.stat(dir).catch(() => undefined);
      if (existing) throw new FsConflictError(`${dir} already exists`, 'already_exists');
      return { entry: entryInfo(await fs.mkdir(dir)) };
    }
    case 'Move':
      return { entry: entryInfo(await fs.move(envdPath(message.source, 'source'), envdPath(message.destination, 'destination'), true)) };
    case 'ListDir': {
      const depth = message.depth === undefined || message.depth === 0 ? 1 : message.depth;
      if (typeof depth !== 'number' || !Number.isInteger(depth) || depth < 1 || depth > MAX_LIST_DEPTH)
        throw new InvalidRequestError(`depth must be a whole number from 1 to ${MAX_LIST_DEPTH}`);
      const listing = await fs.list(envdPath(message.path), depth);
      return { entries: listing.entries.map(entryInfo) };
    }
    case 'Remove':
      await fs.remove(envdPath(message.path), true);
      return {};
    case 'WatchDir': {
      const dir = watchedDir(message);
      const stream = openStream();
      const watch = new DirectoryWatch(
        fs,
        dir,
        (change) => {
          stream.send({ filesystem: changeEvent(dir, change) });
          // A client that does not read: the watch ends rather than buffer without bound.
          if (stream.buffered > WATCH_MAX_BUFFERED_BYTES) stream.end({ code: 'resource_exhausted', message: 'the client did not read the events' });
        },
        (error) => stream.end({ code: 'not_found', message: error.message }),
      );
      stream.onClose(() => watch.stop());
      try {
        await watch.start();
      } catch (err) {
        stream.end({ code: 'not_found', message: (err as Error).message });
        return undefined;
      }
      streamTimers(request, stream, () => ({ keepalive: {} }));
      stream.send({ start: {} });
      return undefined;
    }
    case 'CreateWatcher': {
      if (watchers.watchers.size >= MAX_WATCHERS)
        throw new OrchestratorError('session_process_limit', `the sandbox has ${MAX_WATCHERS} watchers, its limit; remove one`);
      const dir = watchedDir(message);
      const id = crypto.randomUUID();
      const kept: { watch: DirectoryWatch; events: unknown[]; failed?: string } = {
        events: [],
        watch: new DirectoryWatch(
          fs,
          dir,
          (change) => {
            if (kept.events.length < MAX_WATCHER_EVENTS) kept.events.push(changeEvent(dir, change));
          },
          (error) => (kept.failed = error.message),
        ),
      };
      await kept.watch.start();
      watchers.watchers.set(id, kept);
      return { watcherId: id };
    }
    case 'GetWatcherEvents': {
      const kept = watchers.watchers.get(String(message.watcherId));
      if (!kept) throw new OrchestratorError('not_found', `no watcher ${String(message.watcherId).slice(0, 64)}`);
      if (kept.failed) throw new OrchestratorError('file_not_found', kept.failed);
      return { events: kept.events.splice(0) };
    }
    case 'RemoveWatcher': {
      const kept = watchers.watchers.get(String(message.watcherId));
      kept?.watch.stop();
      watchers.watchers.delete(String(message.watcherId));
      return {};
    }
    default:
      throw new E2bUnsupportedError(`filesystem.Filesystem/${method.slice(0, 64)} is not a method of envd's filesystem service`);
  }
}
