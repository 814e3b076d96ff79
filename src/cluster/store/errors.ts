/**
 * The one error the cluster's state answers with when PostgreSQL cannot be reached in time
 * (down, paused, partitioned, out of connections): a 503 the gateway passes on as is, with
 * a Retry-After, never a hang or a 500. Anything else PostgreSQL says (a constraint, a bug in
 * a query) is not turned into it: that would hide a bug behind "try again later".
 */
import { OrchestratorError, UnavailableError } from '../../errors.js';

export class ClusterStateUnavailableError extends UnavailableError {
  constructor(
    what: string,
    readonly causeMessage: string,
  ) {
    super(`the cluster's state (PostgreSQL) cannot be reached: ${what} failed: ${causeMessage}`, 'cluster_state_unavailable', { retryAfterSeconds: 2 });
  }
}

/**
 * SQLSTATE classes that say "the database is not there or not now", not "your query is
 * wrong": 08 connection exception, 53 insufficient resources (too many connections, disk
 * full), 57 operator intervention (query canceled by statement_timeout, admin shutdown,
 * cannot connect now), 58 system error; 40 (serialization failure, deadlock) and 55P03
 * (lock_timeout) are transient contention: the caller may retry them as well.
 */
const TRANSIENT_CLASSES = new Set(['08', '53', '57', '58', '40']);

/** Is `error` the database being unreachable or overloaded (rather than a wrong query)? */
export function isUnavailability(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return TRANSIENT_CLASSES.has(code.slice(0, 2)) || code === '55P03';
  // Node's socket errors (ECONNREFUSED, ECONNRESET, ENOENT for a socket path, ETIMEDOUT...).
  if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return true;
  // pg's own: connect timeout, query read timeout, a connection that ended mid-query, a pool closed.
  return /timeout|terminated|Connection ended|not queryable|Client has encountered a connection error|Cannot use a pool after calling end/i.test(error.message);
}

/** Rethrows `error` as ClusterStateUnavailableError when it is the database being away. */
export function asStoreError(what: string, error: unknown): Error {
  if (error instanceof ClusterStateUnavailableError) return error;
  if (isUnavailability(error)) return new ClusterStateUnavailableError(what, (error as Error).message);
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * place() was given a session id the directory holds already (ids are random: a collision,
 * or a caller reusing one). Nothing was written; the gateway places again under a new id.
 */
export class SessionIdTakenError extends OrchestratorError {
  constructor(readonly sessionId: string) {
    super('session_id_taken', `session id ${sessionId} is taken in the cluster's directory`);
  }
}
