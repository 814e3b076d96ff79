/**
 * What a gateway answers when the cluster, not the request, is the problem (docs/cluster.md).
 * Each is an OrchestratorError, so the API's one error handler answers it in the usual shape.
 */
import { OrchestratorError } from '../../errors.js';

/** PostgreSQL did not answer in time (or could not be reached): 503 cluster_state_unavailable (the store's error). */
export { ClusterStateUnavailableError } from '../store/errors.js';

/** The session's node stopped heartbeating: the session is gone for good (410). */
export class SessionLostError extends OrchestratorError {
  constructor(sessionId: string, node: string, since: string) {
    super('session_lost', `session ${sessionId} was on node ${node}, which stopped answering at ${since}; create a new session`);
  }
}

/**
 * The node holding the session could not be reached: nothing was sent to it, so retrying is
 * safe. A node that stays unreachable is marked lost (its sessions then answer 410).
 */
export class NodeUnreachableError extends OrchestratorError {
  constructor(node: string, why: string) {
    super('node_unreachable', `node ${node} holding this session does not answer (${why}); retry in a few seconds`, { retryAfterSeconds: 2 });
  }
}

/**
 * The request reached the node, but its connection broke (or timed out) before an answer:
 * whether it took effect is unknown, so the client decides whether to retry.
 */
export class NodeFailedError extends OrchestratorError {
  constructor(node: string, why: string) {
    super('node_failed', `node ${node} holding this session stopped answering mid-request (${why}); whether it took effect is unknown`);
  }
}

/** The volume's node is not heartbeating: its data is on that node's disk, not lost; retry once it is back. */
export class VolumeUnavailableError extends OrchestratorError {
  constructor(volume: string, node: string) {
    super('volume_unavailable', `volume ${JSON.stringify(volume)} is on node ${node}, which is not answering; its data comes back with the node`, {
      retryAfterSeconds: 10,
    });
  }
}
