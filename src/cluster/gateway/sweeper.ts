/**
 * Every gateway sweeps the node registry every 2 s: nodes silent for longer than
 * SBX_NODE_LOST_AFTER_MS are marked lost with their sessions (the store does it in one
 * statement, so gateways sweeping at once agree). Errors are logged, never thrown: a sweep
 * that fails (the database down) is simply retried at the next tick.
 *
 * A heartbeat that could not reach the database is no sign of a dead node: after an outage
 * every node's last heartbeat is old. So a gateway marks nothing lost until it has seen the
 * database answer for a whole SBX_NODE_LOST_AFTER_MS (a node alive meanwhile has
 * heartbeated since); at its start too. Nodes that died during the outage are found then.
 */
import type { Logger } from 'pino';
import type { ClusterState } from './cluster-state.js';
import type { InFlight } from './in-flight.js';
import type { GatewayMetrics } from './metrics.js';

export interface Sweeper {
  /** One sweep now (the timer's, and tests'). */
  sweep(): Promise<string[]>;
  stop(): void;
}

export function startSweeper(
  state: ClusterState,
  opts: { lostAfterMs: number; intervalMs: number; logger: Logger; metrics: GatewayMetrics; inFlight: InFlight; now?: () => number },
): Sweeper {
  const now = opts.now ?? Date.now;
  let running: Promise<string[]> | undefined;
  /** Since when every sweep has reached the database (undefined: the last one did not). */
  let reachableSince: number | undefined;
  const sweep = async (): Promise<string[]> => {
    // Never two sweeps at once; one asked for while another runs comes after it (the running
    // one looked at the heartbeats before the call: its answer may be older than the caller's view).
    while (running) await running;
    running = (async () => {
      try {
        if (!(await state.call('ping', (store) => store.ping()))) throw new Error('the cluster database does not answer');
        reachableSince ??= now();
        const sure = now() - reachableSince >= opts.lostAfterMs;
        const lost = sure ? await state.call('markLostNodes', (store) => store.markLostNodes(opts.lostAfterMs)) : [];
        for (const name of lost) {
          opts.metrics.nodesLost.inc();
          opts.logger.warn({ node: name, lostAfterMs: opts.lostAfterMs }, 'node stopped heartbeating: marked lost with its sessions');
        }
        // Nodes another gateway marked lost count too for what this one has in flight.
        const busy = opts.inFlight.nodes();
        const lostElsewhere =
          busy.length === 0
            ? []
            : (await state.call('listNodes', (store) => store.listNodes())).filter((node) => node.state === 'lost').map((node) => node.name);
        for (const name of new Set([...lost, ...lostElsewhere])) {
          state.forgetNode(name);
          const cut = opts.inFlight.cut(name);
          if (cut > 0) opts.logger.warn({ node: name, cut }, 'ended requests and streams in flight to a lost node');
        }
        return lost;
      } catch (err) {
        reachableSince = undefined;
        opts.logger.warn({ err }, 'the sweep for lost nodes failed; retrying at the next tick');
        return [];
      } finally {
        running = undefined;
      }
    })();
    return running;
  };
  // A tick that finds a sweep running skips: a slow store gets no queue of sweeps.
  const timer = setInterval(() => void (running ? undefined : sweep()), opts.intervalMs);
  timer.unref();
  return { sweep, stop: () => clearInterval(timer) };
}
