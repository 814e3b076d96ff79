import { GUEST_USER } from '../guest/contract.js';
import { InvalidRequestError, OrchestratorError } from '../errors.js';

/**
 * Errors of file transfers into and out of a sandbox. Their codes differ from the session
 * errors on purpose: a missing file (`file_not_found`) must not read as a missing session
 * (`not_found`).
 */

export class FileNotFoundError extends OrchestratorError {
  constructor(message: string) {
    super('file_not_found', message);
  }
}

/** The guest user may not do this: uploads and downloads run as that user, not as root. */
export class FilePermissionError extends OrchestratorError {
  constructor(message: string) {
    super('permission_denied', message);
  }
}

export class IsADirectoryError extends OrchestratorError {
  constructor(path: string) {
    super('is_a_directory', `${path} is a directory; give the path of a file`);
  }
}

/** A device, FIFO or socket: reading one could block the guest's SFTP server. */
export class NotARegularFileError extends OrchestratorError {
  constructor(path: string) {
    super('not_a_regular_file', `${path} is not a regular file`);
  }
}

export class FileTooLargeError extends OrchestratorError {
  /** `limitName`: where the limit came from (the server's setting, or the request's maxBytes). */
  constructor(what: string, limit: number, limitName = 'SBX_MAX_FILE_BYTES') {
    super('file_too_large', `${what} is larger than the limit of ${limit} bytes (${limitName})`);
  }
}

/** The client went away before the whole file arrived; nothing was kept. */
export class UploadAbortedError extends OrchestratorError {
  constructor(path: string) {
    super('upload_aborted', `the upload of ${path} was interrupted before the end of the body; nothing was written`);
  }
}

/** The guest's SFTP server failed in a way the client cannot fix (disk full, connection lost...). */
export class FileTransferError extends OrchestratorError {
  constructor(message: string) {
    super('file_transfer_failed', message);
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
    return new FilePermissionError(`permission denied: the sandbox user "${GUEST_USER}" may not ${action} ${path} (SFTP: ${message})`);
  }
  if (status === SFTP_BAD_MESSAGE) return new InvalidRequestError(`the sandbox rejected the path ${path} (SFTP: ${message})`);
  return new FileTransferError(`could not ${action} ${path} in the sandbox: ${message}`);
}
