/** The ways an SSH connection to a guest fails, as callers tell them apart. */

/** The guest presented a host key other than the one we generated for it: never trusted. */
export class HostKeyMismatchError extends Error {
  constructor(endpoint: string) {
    super(`host key of ${endpoint} does not match the key pinned for this session; connection refused`);
    this.name = 'HostKeyMismatchError';
  }
}

/** The guest refused our key: retrying cannot help. */
export class SshAuthenticationError extends Error {
  constructor(endpoint: string) {
    super(`the guest at ${endpoint} refused the session key`);
    this.name = 'SshAuthenticationError';
  }
}

export class SshTimeoutError extends Error {
  constructor(what: string, ms: number) {
    super(`${what} did not finish within ${ms} ms`);
    this.name = 'SshTimeoutError';
  }
}

/** Reconnecting gave up: the guest would not let us back in (why: the last error). */
export class ConnectionLostError extends Error {
  constructor(
    endpoint: string,
    readonly reason: 'host_key_mismatch' | 'authentication' | 'unreachable',
    override readonly cause: Error,
  ) {
    super(
      reason === 'unreachable'
        ? `the SSH connection to ${endpoint} was lost and could not be re-established (last error: ${cause.message})`
        : `the SSH connection to ${endpoint} was lost and the guest then ${reason === 'host_key_mismatch' ? 'presented a host key other than the one pinned for this session' : 'refused the session key'}`,
      { cause },
    );
    this.name = 'ConnectionLostError';
  }
}
