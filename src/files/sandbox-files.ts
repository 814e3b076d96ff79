import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Readable, Transform, pipeline as pipeStreams } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  FileNotFoundError,
  FileTooLargeError,
  FileTransferError,
  IsADirectoryError,
  NotARegularFileError,
  UploadAbortedError,
  fileErrorFromSftp,
} from './errors.js';
import { InvalidRequestError } from '../errors.js';
import type { GuestFileStats, GuestSftp } from '../transport/index.js';

/** What the files need of a session's connection (a GuestTransport has it). */
export interface SftpProvider {
  sftp(timeoutMs?: number): Promise<GuestSftp>;
}

export interface UploadOptions {
  /** More bytes than this fail the upload with FileTooLargeError; nothing is kept. */
  maxBytes: number;
  /** Permissions of the file; default: those of the file it replaces, else 0644. */
  mode?: number;
  /** Called as bytes arrive (the session counts it as activity). */
  onProgress?: () => void;
}

export interface UploadResult {
  path: string;
  size: number;
}

export interface Download {
  path: string;
  size: number;
  /** The file's bytes; destroying it closes the SFTP handle. */
  stream: Readable;
}

/** Mode of a new file when the client names none: what `touch` would make with umask 022. */
export const DEFAULT_FILE_MODE = 0o644;

/**
 * Up to this much of an upload waits in memory while SFTP writes are in flight. ssh2 sends
 * every buffered chunk as its own concurrent write request, so a larger buffer means more
 * writes in flight (throughput) at a bounded cost per upload (memory).
 */
const WRITE_BUFFER_BYTES = 1024 * 1024;
/** Bytes asked for by each SFTP read of a download; one read is in flight at a time. */
const READ_CHUNK_BYTES = 256 * 1024;
/**
 * A file up to this size is read whole before it is answered, its reads all in flight at once
 * (one round trip to the guest's SFTP server instead of one per chunk): a screenshot an SDK
 * reads (400 KiB) is the common case. Larger files stream.
 */
const WHOLE_READ_BYTES = 512 * 1024;
const WHOLE_READ_CHUNK_BYTES = 128 * 1024;

/**
 * Files in and out of one sandbox over SFTP on the session's SSH connection, as the guest
 * user: the guest's own permissions decide what may be read and written.
 */
export class SandboxFiles {
  constructor(private readonly sftp: GuestSftp) {}

  static async on(connection: SftpProvider): Promise<SandboxFiles> {
    try {
      return new SandboxFiles(await connection.sftp());
    } catch (err) {
      throw new FileTransferError(`could not open SFTP on the sandbox's connection: ${(err as Error).message}`);
    }
  }

  /**
   * What a download of `file` would send, without opening it: fails as the download would
   * on a directory, a special file or a file over `maxBytes`.
   */
  async inspect(file: string, maxBytes: number, limitName?: string): Promise<{ path: string; size: number }> {
    const stats = await this.statOrFail(file, 'read');
    if (stats.isDirectory()) throw new IsADirectoryError(file);
    if (!stats.isFile()) throw new NotARegularFileError(file);
    if (stats.size > maxBytes) throw new FileTooLargeError(`${file} (${stats.size} bytes)`, maxBytes, limitName);
    return { path: file, size: stats.size };
  }

  /**
   * Opens a regular file for reading. Size and type are checked before anything is read:
   * a directory or a FIFO never reaches the guest's SFTP server as an open.
   */
  async download(file: string, maxBytes: number, onProgress?: () => void, limitName?: string): Promise<Download> {
    const { size } = await this.inspect(file, maxBytes, limitName);
    let handle: Buffer;
    try {
      handle = await this.sftp.open(file, 'r');
    } catch (err) {
      throw fileErrorFromSftp(err, 'read', file);
    }
    if (size === 0) {
      await this.sftp.close(handle).catch(() => undefined);
      return { path: file, size: 0, stream: Readable.from([]) };
    }
    if (size <= WHOLE_READ_BYTES) {
      const bytes = await this.readWhole(handle, file, size);
      onProgress?.();
      return { path: file, size: bytes.length, stream: Readable.from([bytes]) };
    }
    // Read exactly the bytes the stat announced, so Content-Length stays true even if the
    // file grows meanwhile. The stream closes the handle when it ends or is destroyed.
    const stream = this.sftp.createReadStream(file, {
      handle,
      start: 0,
      end: size - 1,
      highWaterMark: READ_CHUNK_BYTES,
    });
    return { path: file, size, stream: onProgress ? reporting(stream, onProgress) : stream };
  }

  /**
   * The first `size` bytes of an open file, every read in flight at once; the handle is closed
   * without waiting (the answer does not need it). A file that shrank meanwhile gives what it
   * has: the answer's length is what was read.
   */
  private async readWhole(handle: Buffer, file: string, size: number): Promise<Buffer> {
    const bytes = Buffer.allocUnsafe(size);
    try {
      const reads: Array<Promise<number>> = [];
      for (let at = 0; at < size; at += WHOLE_READ_CHUNK_BYTES) {
        reads.push(this.sftp.read(handle, bytes, at, Math.min(WHOLE_READ_CHUNK_BYTES, size - at), at));
      }
      const counts = await Promise.all(reads);
      // Whole up to the first short read; from there one read at a time, until the size or the end.
      const short = counts.findIndex((count, index) => count < Math.min(WHOLE_READ_CHUNK_BYTES, size - index * WHOLE_READ_CHUNK_BYTES));
      if (short === -1) return bytes;
      let length = short * WHOLE_READ_CHUNK_BYTES + (counts[short] ?? 0);
      for (let count = 1; length < size && count > 0; length += count) {
        count = await this.sftp.read(handle, bytes, length, size - length, length);
      }
      return bytes.subarray(0, length);
    } catch (err) {
      throw fileErrorFromSftp(err, 'read', file);
    } finally {
      void this.sftp.close(handle).catch(() => undefined);
    }
  }

  /**
   * Streams `source` into `file`. The bytes go to a hidden temporary file beside it, which
   * is renamed over `file` only once complete: a failed, aborted or oversized upload leaves
   * neither a partial file nor a damaged previous version. A symlink at `file` is followed,
   * so the file it points to is the one replaced. Missing parent directories are not made:
   * that is a 404 naming the parent, so a typo does not silently grow a new tree.
   *
   * `source` is read but never destroyed, so an HTTP caller can still answer on it.
   */
  async upload(file: string, source: Readable, options: UploadOptions): Promise<UploadResult> {
    const target = await this.uploadTarget(file);
    const mode = options.mode ?? (target.existing ? target.existing.mode & 0o7777 : DEFAULT_FILE_MODE);
    const dir = path.posix.dirname(target.path);
    const temp = path.posix.join(dir, `.sbx-upload-${randomBytes(6).toString('hex')}.part`);
    const body = bodyOf(source, options.maxBytes, target.path, options.onProgress);
    try {
      // 'wx': never reuse whatever might already be at the temporary name.
      const handle = await this.sftp.open(temp, 'wx', mode);
      await this.writeAndClose(handle, temp, mode, body);
      await this.sftp.replace(temp, target.path);
      return { path: target.path, size: body.bytes };
    } catch (err) {
      await this.sftp.unlink(temp).catch(() => undefined); // absent if the open failed
      throw fileErrorFromSftp(err, 'write', target.path);
    }
  }

  /** Writes the body through `handle` and closes it, whether the writing succeeds or not. */
  private async writeAndClose(handle: Buffer, file: string, mode: number, body: CountedBody): Promise<void> {
    try {
      // The open's mode went through the server's umask; set exactly what was asked.
      await this.sftp.fchmod(handle, mode);
    } catch (err) {
      await this.sftp.close(handle).catch(() => undefined);
      throw err;
    }
    const sink = this.sftp.createWriteStream(file, { handle, autoClose: false, highWaterMark: WRITE_BUFFER_BYTES });
    // On failure pipeline destroys the sink, and destroying it closes the handle.
    await pipeline(body.chunks, sink);
    await this.sftp.close(handle);
  }

  /**
   * Where an upload lands: `file`, or what its symlink points to, with the file it will
   * replace (if any). Fails early, naming the problem, if it cannot be written there.
   */
  private async uploadTarget(file: string): Promise<{ path: string; existing: GuestFileStats | undefined }> {
    if (file === '/') throw new IsADirectoryError(file);
    let resolved = file;
    let existing: GuestFileStats | undefined;
    try {
      const link = await this.sftp.lstat(file);
      if (link.isSymbolicLink()) resolved = await this.sftp.realpath(file);
      existing = link.isSymbolicLink() ? await this.sftp.stat(resolved) : link;
    } catch (err) {
      const mapped = fileErrorFromSftp(err, 'write', file);
      // A dangling symlink is replaced like any missing file; other failures are final.
      if (!(mapped instanceof FileNotFoundError)) throw mapped;
      resolved = file;
      existing = undefined;
    }
    if (existing?.isDirectory()) throw new IsADirectoryError(resolved);
    const parent = path.posix.dirname(resolved);
    const parentStats = await this.sftp.stat(parent).catch((err: unknown) => {
      const mapped = fileErrorFromSftp(err, 'write', resolved);
      if (mapped instanceof FileNotFoundError) {
        throw new FileNotFoundError(`parent directory ${parent} does not exist in the sandbox (create it first)`);
      }
      throw mapped;
    });
    if (!parentStats.isDirectory()) throw new InvalidRequestError(`${parent} is not a directory, so ${resolved} cannot be created`);
    return { path: resolved, existing };
  }

  private async statOrFail(file: string, action: string): Promise<GuestFileStats> {
    try {
      return await this.sftp.stat(file);
    } catch (err) {
      throw fileErrorFromSftp(err, action, file);
    }
  }
}

interface CountedBody {
  chunks: AsyncGenerator<Buffer>;
  /** Bytes read so far. */
  readonly bytes: number;
}

/**
 * The upload's bytes, counted: more than `maxBytes` stops the upload. The source is read
 * with `destroyOnReturn: false` so a failure downstream (limit, SFTP error) leaves it alive
 * for the caller to answer on, and a failure of the source itself (the client went away)
 * is told apart from the others.
 */
function bodyOf(source: Readable, maxBytes: number, target: string, onProgress?: () => void): CountedBody {
  let bytes = 0;
  async function* chunks(): AsyncGenerator<Buffer> {
    const incoming: AsyncIterable<Buffer> = source.iterator({ destroyOnReturn: false });
    try {
      for await (const chunk of incoming) {
        bytes += chunk.length;
        if (bytes > maxBytes) throw new FileTooLargeError(`the upload to ${target}`, maxBytes);
        onProgress?.();
        yield chunk;
      }
    } catch (err) {
      if (err instanceof FileTooLargeError) throw err;
      throw new UploadAbortedError(target);
    }
  }
  return {
    chunks: chunks(),
    get bytes() {
      return bytes;
    },
  };
}

/**
 * The download's bytes, calling `onProgress` as each chunk passes (so it is called only while
 * the client reads: back-pressure stops it when the client stalls). Destroying the result
 * destroys the SFTP stream, which closes its handle.
 */
function reporting(source: Readable, onProgress: () => void): Readable {
  const out = new Transform({
    highWaterMark: READ_CHUNK_BYTES,
    transform(chunk: Buffer, _encoding, done) {
      onProgress();
      done(null, chunk);
    },
  });
  pipeStreams(source, out, () => undefined); // errors reach `out`; the callback only silences
  return out;
}
