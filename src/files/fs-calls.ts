import path from 'node:path';
import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { shellQuote } from '../transport/quote.js';
import { fileErrorFromSftp } from './errors.js';
import type { GuestFileStats, GuestSftp } from '../transport/index.js';

/** One entry of a listing or a stat. */
export interface FsEntry {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits, as octal text (e.g. "0644"). */
  mode: string;
  mtime: string;
  /** A symlink's target (stat only). */
  target?: string;
}

export interface FsListing {
  path: string;
  entries: FsEntry[];
  /** More entries than maxEntries: the listing stops there. */
  truncated: boolean;
}

export const MAX_LIST_DEPTH = 5;
/** Entries one listing returns at most (and a watch compares at most). */
export const MAX_LIST_ENTRIES = 10_000;
const REMOVE_TIMEOUT_MS = 60_000;

export class FsConflictError extends OrchestratorError {
  constructor(message: string, code: 'already_exists' | 'directory_not_empty' | 'not_a_directory') {
    super(code, message);
  }
}

/** What a recursive remove needs beside SFTP: a command on the session's connection. */
export interface CommandRunner {
  exec(command: string, opts?: { timeoutMs?: number; maxOutputBytes?: number }): Promise<{ exitCode: number | null; stderr: Buffer }>;
}

export function entryType(mode: number): FsEntry['type'] {
  const kind = mode & 0o170000;
  return kind === 0o040000 ? 'dir' : kind === 0o100000 ? 'file' : kind === 0o120000 ? 'symlink' : 'other';
}

function entryOf(file: string, attrs: Pick<GuestFileStats, 'mode' | 'size' | 'mtime'>): FsEntry {
  return {
    name: path.posix.basename(file) || '/',
    path: file,
    type: entryType(attrs.mode),
    size: attrs.size,
    mode: `0${(attrs.mode & 0o7777).toString(8).padStart(3, '0')}`,
    mtime: new Date(attrs.mtime * 1000).toISOString(),
  };
}

/**
 * The filesystem calls (docs/api.md#filesystem) over SFTP on the session's connection, as the
 * guest user: paths are SFTP arguments (data, never a command), normalised by sandboxPath
 * before they come here. Only a recursive remove runs a command (`rm -rf -- <quoted path>`),
 * since SFTP has no such request and walking a tree over it costs a round trip per entry.
 */
export class FsCalls {
  constructor(
    private readonly sftp: GuestSftp,
    private readonly runner: CommandRunner,
  ) {}

  async stat(file: string): Promise<FsEntry> {
    const attrs = await this.sftp.lstat(file).catch((err: unknown) => Promise.reject(fileErrorFromSftp(err, 'stat', file)));
    const entry = entryOf(file, attrs);
    if (entry.type === 'symlink') {
      const target = await this.sftp.readlink(file).catch(() => undefined);
      if (target !== undefined) entry.target = target;
    }
    return entry;
  }

  /** The directory's entries, `depth` levels down (1: its own), symlinks not followed, at most maxEntries. */
  async list(dir: string, depth: number, maxEntries = MAX_LIST_ENTRIES): Promise<FsListing> {
    if (!Number.isInteger(depth) || depth < 1 || depth > MAX_LIST_DEPTH)
      throw new InvalidRequestError(`depth must be a whole number from 1 to ${MAX_LIST_DEPTH}`);
    const top = await this.stat(dir);
    if (top.type !== 'dir') throw new FsConflictError(`${dir} is not a directory`, 'not_a_directory');
    const entries: FsEntry[] = [];
    let level = [dir];
    for (let d = 1; d <= depth && level.length > 0; d++) {
      const next: string[] = [];
      for (const parent of level) {
        const room = maxEntries - entries.length;
        const found = await this.readdir(parent, room + 1).catch((err: unknown) => {
          // A subdirectory the user may not read is left out, not the whole listing failed.
          if (parent !== dir) return [];
          throw fileErrorFromSftp(err, 'list', parent);
        });
        for (const item of found) {
          if (entries.length >= maxEntries) return { path: dir, entries, truncated: true };
          entries.push(item);
          if (item.type === 'dir') next.push(item.path);
        }
      }
      level = next;
    }
    return { path: dir, entries, truncated: false };
  }

  /** mkdir -p: each missing directory on the way made, an existing directory is fine. */
  async mkdir(dir: string, mode = 0o755): Promise<FsEntry> {
    const parts = dir.split('/').filter(Boolean);
    let at = '';
    for (const part of parts) {
      at += `/${part}`;
      const existing = await this.sftp.stat(at).catch(() => undefined);
      if (existing) {
        if (entryType(existing.mode) !== 'dir') throw new FsConflictError(`${at} exists and is not a directory`, 'already_exists');
        continue;
      }
      await this.sftp.mkdir(at, mode).catch(async (err: unknown) => {
        // Made by someone else meanwhile: fine if it is a directory now.
        const now = await this.sftp.stat(at).catch(() => undefined);
        if (!now || entryType(now.mode) !== 'dir') throw fileErrorFromSftp(err, 'create', at);
      });
    }
    return this.stat(dir);
  }

  /** Renames `from` to `to`; an existing `to` is replaced only with overwrite. */
  async move(from: string, to: string, overwrite: boolean): Promise<FsEntry> {
    await this.stat(from);
    const existing = await this.sftp.lstat(to).catch(() => undefined);
    if (existing && !overwrite) throw new FsConflictError(`${to} already exists (give overwrite: true to replace it)`, 'already_exists');
    if (overwrite) await this.sftp.replace(from, to).catch((err: unknown) => Promise.reject(fileErrorFromSftp(err, 'move', from)));
    else await this.sftp.rename(from, to).catch((err: unknown) => Promise.reject(fileErrorFromSftp(err, 'move', from)));
    return this.stat(to);
  }

  /** Removes a file or symlink; a directory only if empty, unless recursive. */
  async remove(file: string, recursive: boolean): Promise<void> {
    if (file === '/') throw new InvalidRequestError('path: the root directory cannot be removed');
    const entry = await this.stat(file);
    if (entry.type !== 'dir') {
      await this.sftp.unlink(file).catch((err: unknown) => Promise.reject(fileErrorFromSftp(err, 'remove', file)));
      return;
    }
    if (!recursive) {
      await this.sftp.rmdir(file).catch(async (err: unknown) => {
        const left = await this.readdir(file, 1).catch(() => []);
        if (left.length > 0) throw new FsConflictError(`${file} is not empty (give recursive: true to remove it and everything in it)`, 'directory_not_empty');
        throw fileErrorFromSftp(err, 'remove', file);
      });
      return;
    }
    // The path is one single-quoted word after --: never an option, never more than one argument.
    const result = await this.runner.exec(`rm -rf -- ${shellQuote(file)}`, { timeoutMs: REMOVE_TIMEOUT_MS, maxOutputBytes: 64 * 1024 });
    if (result.exitCode !== 0) {
      const said = result.stderr.toString('utf8').trim().split('\n')[0]?.slice(0, 300) ?? '';
      throw new OrchestratorError('permission_denied', `could not remove all of ${file}${said ? `: ${said}` : ''}`);
    }
  }

  /** Up to `limit` entries of a directory (fewer round trips than a stat each: SFTP gives the attributes). */
  async readdir(dir: string, limit: number): Promise<FsEntry[]> {
    const handle = await this.sftp.opendir(dir);
    const out: FsEntry[] = [];
    try {
      while (out.length < limit) {
        const batch = await this.sftp.readdir(handle);
        if (!batch) break;
        for (const item of batch) {
          // A name is one path component; anything else the guest's server says is not listed.
          if (item.filename === '.' || item.filename === '..' || item.filename.includes('/') || item.filename.length === 0) continue;
          out.push(entryOf(path.posix.join(dir, item.filename), item.attrs));
        }
      }
    } finally {
      await this.sftp.close(handle).catch(() => undefined);
    }
    return out.slice(0, limit);
  }
}
