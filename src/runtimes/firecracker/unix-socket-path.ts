/**
 * A Unix socket address holds at most 108 bytes including the terminating NUL (sun_path on
 * Linux), so a longer path cannot be bound or connected to. Depending on the library, an
 * over-long path fails with a confusing error or is silently cut short and reaches some
 * other file, so every socket path this runtime makes (the API socket, the vsock socket,
 * seen from the host and from inside the jail) is checked here first.
 */
export const UNIX_SOCKET_PATH_MAX_BYTES = 107;

export function assertUnixSocketPath(socketPath: string, what: string): void {
  const bytes = Buffer.byteLength(socketPath);
  if (bytes > UNIX_SOCKET_PATH_MAX_BYTES) {
    throw new Error(
      `${what} ${socketPath} is ${bytes} bytes long; a Unix socket path may have at most ` +
        `${UNIX_SOCKET_PATH_MAX_BYTES}: use a shorter state dir or jailer chroot base dir`,
    );
  }
}
