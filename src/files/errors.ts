import { GUEST_USER } from '../guest/contract.js';
import { InvalidRequestError, OrchestratorError } from '../errors.js';

/**
 * Errors of file transfers into and out of a sandbox. Their codes differ from the session
 * errors on purpose: a missing file (`file_not_found`) must not read as a missing session
 * (`not_found`).
 */

export class FileNotFoundError extends OrchestratorError {
  constructor(message: string) {
    super(message, 404, 'file_not_found');
  }
}

/** The guest user may not do this: uploads and downloads run as that user, not as root. */
export class FilePermissionError extends OrchestratorError {
  constructor(message: string) {
    super(message, 403, 'permission_denied');
  }
}

export class IsADirectoryError extends OrchestratorError {
  constructor(path: string) {
    super(`${path} is a directory; give the path of a file`, 400, 'is_a_directory');
  }
}

/** A device, FIFO or socket: reading one could block the guest's SFTP server. */
export class NotARegularFileError extends OrchestratorError {
  constructor(path: string) {
    super(`${path} is not a regular file`, 400, 'not_a_regular_file');
  }
}

export class FileTooLargeError extends OrchestratorError {
  constructor(what: string, limit: number) {
    super(`${what} is larger than the limit of ${limit} bytes (SBX_MAX_FILE_BYTES)`, 413, 'file_too_large');
  }
}

/** The client went away before the whole file arrived; nothing was kept. */
export class UploadAbortedError extends OrchestratorError {
  constructor(path: string) {
    super(`the upload of ${path} was interrupted before the end of the body; nothing was written`, 400, 'upload_aborted');
  }
}

/** The guest's SFTP server failed in a way the client cannot fix (disk full, connection lost...). */
export class FileTransferError extends OrchestratorError {
  constructor(message: string) {
    super(message, 502, 'file_transfer_failed');
  }
}

/** SFTP status codes (draft-ietf-secsh-filexfer-02, the version OpenSSH speaks). */
const SFTP_NO_SUCH_FILE = 2;
const SFTP_PERMISSION_DENIED = 3;
const SFTP_BAD_MESSAGE = 5;

/**
 * Turns an error of an SFTP request into one a client can act on. OpenSSH maps errno to
 * few statuses: ENOENT and ENOTDIR become NO_SUCH_FILE, EACCES and EPERM become
 * PERMISSION_DENIED, ENAMETOOLONG and EINVAL become BAD_MESSAGE, and everything else
 * (ENOSPC, EROFS, EISDIR...) is a bare FAILURE, which is why directories are recognised
 * with a stat before they can reach that point.
 */
export function fileErrorFromSftp(err: unknown, action: string, path: string): Error {
  if (err instanceof OrchestratorError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const status = (err as { code?: unknown } | null)?.code;
  if (status === SFTP_NO_SUCH_FILE) return new FileNotFoundError(`no such file in the sandbox: ${path}`);
  if (status === SFTP_PERMISSION_DENIED) {
    return new FilePermissionError(
      `permission denied: the sandbox user "${GUEST_USER}" may not ${action} ${path} (SFTP: ${message})`,
    );
  }
  if (status === SFTP_BAD_MESSAGE) return new InvalidRequestError(`the sandbox rejected the path ${path} (SFTP: ${message})`);
  return new FileTransferError(`could not ${action} ${path} in the sandbox: ${message}`);
}
