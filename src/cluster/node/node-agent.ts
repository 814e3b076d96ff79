/**
 * A node's membership of a cluster (`sbx node`, docs/cluster.md): it registers itself in the
 * shared directory, heartbeats what it can take, tells the directory when its sessions end,
 * and reconciles what it runs against what the directory says it should.
 *
 * The node never decides placement and never serves a client directly: its gateways do both.
 * If the database is unreachable the node keeps serving the sessions it has (their requests
 * come routed by gateways that still know them); what it could not tell the directory is
 * told at the next heartbeat that gets through.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { NodeNameTakenError, type ClusterStore, type NodeReport } from '../store/cluster-store.js';

/** What the agent needs of the node's orchestrator. */
export interface NodeSessions {
  /** Ids of the sessions this node runs now (every state but destroyed). */
  ids(): string[];
  /** Destroys a session the cluster gave up (idempotent). */
  destroy(id: string): Promise<unknown>;
}

export interface NodeAgentOptions {
  store: ClusterStore;
  name: string;
  heartbeatMs: number;
  /** What the node offers now (called for every heartbeat). */
  report(): Promise<NodeReport>;
  sessions: NodeSessions;
  log: Logger;
}

export class NodeAgent {
  /** Random per process: a heartbeat from an older process of the same name is refused. */
  readonly instance = randomUUID();
  /** Sessions seen running at the last tick: one gone since has ended. */
  private seen = new Set<string>();
  /** Ends the directory has not heard of yet (the database was unreachable). */
  private readonly unreported = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(private readonly opts: NodeAgentOptions) {}

  /** Registers (refused if a live process holds the name), reconciles, then heartbeats. */
  async start(): Promise<void> {
    const { store, name, log } = this.opts;
    try {
      await store.registerNode(name, this.instance, await this.opts.report());
    } catch (err) {
      if (err instanceof NodeNameTakenError) throw new Error(`node name ${name} is held by another live node: give this one another --name`);
      throw err;
    }
    log.info({ node: name, instance: this.instance }, 'registered in the cluster');
    await this.reconcile();
    this.timer = setInterval(() => {
      this.ticking = this.ticking.then(() => this.tick());
    }, this.opts.heartbeatMs);
    this.timer.unref();
  }

  /** Stops heartbeating (the node's row stays: a restart of the same name takes it over). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.ticking;
  }

  /** One heartbeat: report ends, say what the node offers, act on the answer. Never throws. */
  private async tick(): Promise<void> {
    if (this.stopped) return;
    const { store, name, log } = this.opts;
    try {
      this.noteEnds();
      for (const id of [...this.unreported]) {
        await store.end(id);
        this.unreported.delete(id);
      }
      const answer = await store.heartbeat(name, this.instance, await this.opts.report());
      if (answer === 'lost') {
        // The cluster gave this node up while it was silent: its sessions were answered 410,
        // so they go; then it is a member again.
        log.warn({ node: name }, 'the cluster had marked this node lost: registering again and destroying the sessions it gave up');
        await store.registerNode(name, this.instance, await this.opts.report());
        await this.reconcile();
      } else if (answer === 'replaced') {
        log.error({ node: name }, 'another process registered this node name: this one no longer heartbeats (stop it, or give one of them another --name)');
        this.stopped = true;
        clearInterval(this.timer);
      }
    } catch (err) {
      log.warn({ err, node: name }, 'heartbeat failed (the cluster database is unreachable?); serving the sessions already routed here');
    }
  }

  /** Sessions that were running at the last tick and are gone now have ended. */
  private noteEnds(): void {
    const now = new Set(this.opts.sessions.ids());
    for (const id of this.seen) if (!now.has(id)) this.unreported.add(id);
    this.seen = now;
  }

  /**
   * Destroys what the directory does not hold as this node's live session: a session placed
   * elsewhere, one it forgot, or one it gave up (lost) or ended while this node was away.
   */
  async reconcile(): Promise<void> {
    const { store, name, log } = this.opts;
    for (const id of this.opts.sessions.ids()) {
      const entry = await store.lookup(id);
      const keep = entry !== undefined && entry.node === name && (entry.state === 'live' || entry.state === 'creating');
      if (keep) continue;
      log.warn(
        { sessionId: id, directory: entry ? { node: entry.node, state: entry.state } : null },
        "destroying a session the cluster does not hold as this node's",
      );
      await this.opts.sessions.destroy(id).catch((err: unknown) => log.error({ err, sessionId: id }, 'destroying a session the cluster gave up failed'));
      if (entry?.state === 'lost' && entry.node === name) await store.end(id);
    }
    this.seen = new Set(this.opts.sessions.ids());
  }
}
