import { GUEST_USER } from '../../guest/contract.js';
import type { GuestSftp } from '../../transport/index.js';
import { ToolError } from '../tool-error.js';

/** Files larger than this are not read into the orchestrator; the bash tool can page through them. */
export const MAX_FILE_BYTES = 10 * 1024 * 1024;

export type PathKind = 'file' | 'directory' | 'other' | 'missing';

/** SFTP status codes (draft-ietf-secsh-filexfer-02, the version OpenSSH speaks). */
const SFTP_NO_SUCH_FILE = 2;
const SFTP_PERMISSION_DENIED = 3;

/**
 * The editor's file I/O, over SFTP on the session's connection: paths and contents travel
 * as protocol fields, never through a shell, so no file name or text can be taken for code.
 * Everything runs as the guest user, with that user's permissions.
 */
export class SftpFiles {
  constructor(private readonly sftp: GuestSftp) {}

  /** What is at `path`, following symbolic links (as the reference's Path.exists() does). */
  async kind(path: string): Promise<PathKind> {
    let stats;
    try {
      stats = await this.sftp.stat(path);
    } catch (err) {
      if (statusOf(err) === SFTP_NO_SUCH_FILE) return 'missing';
      throw new ToolError(`Ran into ${describe(err as Error, path)} while trying to access ${path}`);
    }
    return stats.isDirectory() ? 'directory' : stats.isFile() ? 'file' : 'other';
  }

  /**
   * The file as UTF-8 text, exactly (a byte order mark is kept, CRLF is kept). Read as a
   * stream with a cap rather than trusting the size from stat: /proc files say 0 bytes.
   */
  readText(path: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const stream = this.sftp.createReadStream(path, { start: 0, end: MAX_FILE_BYTES });
      stream.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        size += chunk.length;
      });
      stream.on('error', (err: Error) => reject(new ToolError(`Ran into ${describe(err, path)} while trying to read ${path}`)));
      stream.on('end', () => {
        if (size > MAX_FILE_BYTES) {
          return reject(
            new ToolError(
              `The file ${path} is larger than ${MAX_FILE_BYTES} bytes, too large for this tool. ` +
                "Use the bash tool to work on parts of it, e.g. `grep -n` to find lines and `sed -n '100,200p'` to print them.",
            ),
          );
        }
        try {
          resolve(new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(Buffer.concat(chunks)));
        } catch {
          reject(new ToolError(`The file ${path} is not UTF-8 text (it may be binary); use the bash tool to inspect it, e.g. \`file\` or \`xxd | head\`.`));
        }
      });
    });
  }

  /**
   * Writes the whole file. `create` refuses to replace an existing one (O_EXCL), which also
   * closes the gap between the caller's existence check and the write. An existing file
   * keeps its inode, owner and mode.
   */
  async writeText(path: string, text: string, opts: { create: boolean }): Promise<void> {
    try {
      await this.sftp.writeFile(path, Buffer.from(text, 'utf8'), { flag: opts.create ? 'wx' : 'w' });
    } catch (err) {
      throw new ToolError(`Ran into ${describe(err as Error, path)} while trying to write to ${path}`);
    }
  }
}

function statusOf(err: unknown): unknown {
  return (err as { code?: unknown } | null)?.code;
}

/** The error in words, with what to do about the common ones. */
function describe(err: Error, path: string): string {
  const status = statusOf(err);
  if (status === SFTP_NO_SUCH_FILE) {
    const dir = path.slice(0, path.lastIndexOf('/')) || '/';
    return `No such file or directory (does ${dir} exist? Create it first, e.g. with \`mkdir -p ${dir}\` in the bash tool)`;
  }
  if (status === SFTP_PERMISSION_DENIED) return `Permission denied (the tool runs as the sandbox user "${GUEST_USER}")`;
  return err.message;
}
