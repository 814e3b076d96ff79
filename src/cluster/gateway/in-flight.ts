/**
 * Requests and sockets in flight to each node, so that a node found lost ends them at once.
 * A node that is partitioned (not killed: its host still up, its packets dropped) never
 * answers nor resets: without this, a request sent to it would wait for the answer timeout
 * (10 minutes) and an event stream or a live view would stall forever. When the sweep finds
 * the node lost (this gateway's, or another's seen in the registry), each is cut: a request
 * not yet answered gets 502 node_failed, a stream or a socket is closed (the client then
 * reconnects, and is told 410 session_lost).
 */
export class InFlight {
  private readonly byNode = new Map<string, Set<() => void>>();

  /** Registers a way to end something in flight to `node`; returns its removal. */
  track(node: string, cut: () => void): () => void {
    let set = this.byNode.get(node);
    if (!set) {
      set = new Set();
      this.byNode.set(node, set);
    }
    const mine = set;
    mine.add(cut);
    return () => {
      mine.delete(cut);
      if (mine.size === 0 && this.byNode.get(node) === mine) this.byNode.delete(node);
    };
  }

  /** Nodes with something in flight now. */
  nodes(): string[] {
    return [...this.byNode.keys()];
  }

  /** Ends everything in flight to `node`. Returns how many were cut. */
  cut(node: string): number {
    const set = this.byNode.get(node);
    if (!set) return 0;
    this.byNode.delete(node);
    for (const cut of set) cut();
    return set.size;
  }
}
