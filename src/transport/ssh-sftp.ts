import type { Readable, Writable } from 'node:stream';
import type { SFTPWrapper } from 'ssh2';
import type { GuestFileStats, GuestSftp } from './guest-transport.js';

/**
 * The guest's SFTP session as promises (GuestSftp). ssh2 only offers callbacks, and
 * util.promisify cannot pick the right overload of its methods.
 */
export class SshSftp implements GuestSftp {
  constructor(private readonly sftp: SFTPWrapper) {}

  stat(path: string): Promise<GuestFileStats> {
    return new Promise((resolve, reject) => this.sftp.stat(path, (err, stats) => (err ? reject(err) : resolve(stats))));
  }

  lstat(path: string): Promise<GuestFileStats> {
    return new Promise((resolve, reject) => this.sftp.lstat(path, (err, stats) => (err ? reject(err) : resolve(stats))));
  }

  realpath(path: string): Promise<string> {
    return new Promise((resolve, reject) => this.sftp.realpath(path, (err, real) => (err ? reject(err) : resolve(real))));
  }

  open(path: string, flags: 'r' | 'w' | 'wx', mode = 0o644): Promise<Buffer> {
    return new Promise((resolve, reject) => this.sftp.open(path, flags, { mode }, (err, handle) => (err ? reject(err) : resolve(handle))));
  }

  fchmod(handle: Buffer, mode: number): Promise<void> {
    return new Promise((resolve, reject) => this.sftp.fchmod(handle, mode, (err) => (err ? reject(err) : resolve())));
  }

  close(handle: Buffer): Promise<void> {
    return new Promise((resolve, reject) => this.sftp.close(handle, (err) => (err ? reject(err) : resolve())));
  }

  unlink(path: string): Promise<void> {
    return new Promise((resolve, reject) => this.sftp.unlink(path, (err) => (err ? reject(err) : resolve())));
  }

  /**
   * Renames over an existing file, atomically (OpenSSH's posix-rename extension). Plain
   * SFTP v3 rename refuses to replace a file, so it is only the fallback for other servers.
   */
  replace(from: string, to: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = (err: Error | undefined | null) => (err ? reject(err) : resolve());
      try {
        this.sftp.ext_openssh_rename(from, to, done);
      } catch {
        // ssh2 throws at once when the server did not announce the extension.
        this.sftp.rename(from, to, done);
      }
    });
  }

  writeFile(path: string, data: Buffer, opts: { flag: 'w' | 'wx' }): Promise<void> {
    return new Promise((resolve, reject) => this.sftp.writeFile(path, data, opts, (err) => (err ? reject(err) : resolve())));
  }

  readlink(path: string): Promise<string> {
    return new Promise((resolve, reject) => this.sftp.readlink(path, (err, link) => (err ? reject(err) : resolve(link))));
  }

  mkdir(path: string, mode: number): Promise<void> {
    return new Promise((resolve, reject) => this.sftp.mkdir(path, { mode }, (err) => (err ? reject(err) : resolve())));
  }

  rename(from: string, to: string): Promise<void> {
    return new Promise((resolve, reject) => this.sftp.rename(from, to, (err) => (err ? reject(err) : resolve())));
  }

  rmdir(path: string): Promise<void> {
    return new Promise((resolve, reject) => this.sftp.rmdir(path, (err) => (err ? reject(err) : resolve())));
  }

  opendir(path: string): Promise<Buffer> {
    return new Promise((resolve, reject) => this.sftp.opendir(path, (err, handle) => (err ? reject(err) : resolve(handle))));
  }

  readdir(handle: Buffer): Promise<Array<{ filename: string; attrs: GuestFileStats }> | false> {
    return new Promise((resolve, reject) =>
      this.sftp.readdir(handle, (err, list) => {
        // ssh2 reports the end of the directory as an EOF status.
        if (err && (err as { code?: unknown }).code === 1) return resolve(false);
        if (err) return reject(err);
        resolve(list as unknown as Array<{ filename: string; attrs: GuestFileStats }> | false);
      }),
    );
  }

  read(handle: Buffer, into: Buffer, offset: number, length: number, position: number): Promise<number> {
    return new Promise((resolve, reject) =>
      this.sftp.read(handle, into, offset, length, position, (err, bytesRead) => {
        // ssh2 reports a read at the end of the file as an EOF status: nothing read.
        if (err && (err as { code?: unknown }).code === 1) return resolve(0);
        if (err) return reject(err);
        resolve(bytesRead);
      }),
    );
  }

  createReadStream(path: string, opts: { handle?: Buffer; start?: number; end?: number; highWaterMark?: number }): Readable {
    return this.sftp.createReadStream(path, opts);
  }

  createWriteStream(path: string, opts: { handle?: Buffer; autoClose?: boolean; highWaterMark?: number }): Writable {
    return this.sftp.createWriteStream(path, opts);
  }
}
