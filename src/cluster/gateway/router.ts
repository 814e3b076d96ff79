/**
 * Where a request goes, from the directory: the decisions, made before anything is proxied.
 *
 * - A session of the caller's tenant: its node. A session of another tenant, and an id of a
 *   session's shape the directory does not hold: the 404 of `sbx serve`, same message.
 * - A session that is `lost`, or whose node is: 410 session_lost with when its node was last
 *   heard from.
 * - Anything the gateway cannot route and that cannot name a session of anyone (an id that is
 *   not a session id's shape, an unknown run or view token, a link-token page of an unknown
 *   session): any healthy node, with the caller's tenant, which answers exactly as a single
 *   host does for something that does not exist (it holds nothing by that name either).
 */
import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { NotFoundError, UnavailableError } from '../../errors.js';
import { SESSION_ID_PATTERN } from '../../network/names.js';
import type { DirectoryEntry, NodeRecord } from '../store/cluster-store.js';
import type { ClusterState } from './cluster-state.js';
import { SessionLostError } from './errors.js';
import type { Target } from './forward.js';

export const RUN_ID_PATTERN = /^run_[0-9a-f]{24}$/;

export function viewTokenHash(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

export class Router {
  constructor(private readonly state: ClusterState) {}

  /** The node of a session the caller may reach (see above); `undefined` entry: route anywhere. */
  async session(request: FastifyRequest, sessionId: string): Promise<Target> {
    const entry = await this.state.lookup(sessionId);
    if (request.viaLink) {
      // No tenant to check: the token is checked by the node. A session that is not routable
      // goes where its token will be refused exactly as a wrong token is.
      if (!entry || entry.state === 'lost') return this.anyNode();
      const node = await this.state.node(entry.node);
      return node && node.state === 'up' ? node : this.anyNode();
    }
    if (!entry) {
      if (SESSION_ID_PATTERN.test(sessionId)) throw new NotFoundError(`session ${sessionId} does not exist`);
      return this.anyNode();
    }
    if (entry.tenant !== request.tenant) throw new NotFoundError(`session ${sessionId} does not exist`);
    return this.nodeOf(entry);
  }

  /** The node of a directory entry, or 410 when it (or its node) is lost. */
  async nodeOf(entry: DirectoryEntry): Promise<Target> {
    const node = entry.state === 'lost' ? undefined : await this.state.node(entry.node);
    if (entry.state === 'lost' || !node || node.state === 'lost') {
      const known = node ?? (await this.state.node(entry.node).catch(() => undefined));
      this.state.forgetNode(entry.node);
      throw new SessionLostError(entry.sessionId, entry.node, known ? known.lastHeartbeat.toISOString() : 'an unknown time');
    }
    return node;
  }

  /** A run's session's node; an unknown run (or another tenant's) answers the node's 404. */
  async run(request: FastifyRequest, runId: string): Promise<Target> {
    if (!RUN_ID_PATTERN.test(runId)) return this.anyNode(); // the node's 400 naming the pattern
    const sessionId = await this.state.call('lookupRun', (store) => store.lookupRun(runId));
    const entry = sessionId === undefined ? undefined : await this.state.lookup(sessionId);
    if (!entry || entry.tenant !== request.tenant) throw new NotFoundError(`run ${runId} does not exist`);
    return this.nodeOf(entry);
  }

  /** A live view's token: the node of its session, or any node when the token is unknown. */
  async view(token: string): Promise<Target> {
    const sessionId = await this.state.call('lookupViewToken', (store) => store.lookupViewToken(viewTokenHash(token)));
    const entry = sessionId === undefined ? undefined : await this.state.lookup(sessionId);
    if (!entry) return this.anyNode();
    return this.nodeOf(entry);
  }

  /** Any up, heartbeating node (chosen at random): 503 when there is none. */
  async anyNode(): Promise<NodeRecord> {
    const nodes = await this.state.healthyNodes();
    const node = nodes[Math.floor(Math.random() * nodes.length)];
    if (!node) throw new UnavailableError('no node of the cluster is up to answer this; retry in a few seconds');
    return node;
  }
}
