import type { Logger } from 'pino';
import type { ResourceNames } from '../network/names.js';
import { deleteLink, deleteNetns, listSandboxLinks, listSandboxNetns } from '../network/netns.js';
import type { NetworkPolicy } from '../network/policy/network-policy.js';
import type { Runtime } from '../runtimes/runtime.js';
import { sessionDirOf } from './boot.js';
import { reclaimRecorded } from './resource-ledger.js';
import { removeSessionDir, type CountKeptDir } from './session-dir.js';
import type { SessionStore } from './store.js';

export interface ReconcileOptions {
  stateDir: string;
  names: ResourceNames;
  runtime: Runtime;
  store: SessionStore;
  policy: NetworkPolicy;
  log: Logger;
  /** Sessions adopted alive (adopt.ts): theirs is not left behind. */
  keep?: ReadonlySet<string>;
  /** Counts a session directory left on disk because something is still mounted in it. */
  countKeptDir?: CountKeptDir;
}

/**
 * Start-up reconciliation: whatever an earlier run left on the host (a crash, a SIGKILL, a
 * power cut) is found by the store (its rows and its ledger) and by our naming prefix
 * (containers, netns, veths: names only we give), and reclaimed in a fixed order:
 * sandbox processes and mounts, then network, then key directories. Sessions adopted alive
 * (`keep`) are left alone; every other unfinished session is reclaimed and marked
 * destroyed, and so is one being created when the earlier run stopped. Returns how many
 * sandboxes were reclaimed.
 *
 * A folder of the state directory is never taken for ours by its name alone: a session id is
 * just 10 characters of [a-z0-9], which an operator's folder may be too. A session directory
 * is removed only for a session the store names (a row or ledger entries); one of a sandbox
 * found only by its prefixed name is left, and logged.
 */
export async function reconcileHost(opts: ReconcileOptions): Promise<number> {
  const { stateDir, names, runtime, store, policy, log } = opts;
  const keep = opts.keep ?? new Set<string>();
  const ids = new Set<string>();
  const unfinished = store.unfinished().filter((record) => !keep.has(record.id));
  for (const record of unfinished) ids.add(record.id);
  for (const id of store.sessionsWithResources()) ids.add(id);
  // What the store names; the rest below is found by the names only we give.
  const named = new Set(ids);
  for (const id of await runtime.list()) ids.add(id);
  for (const id of await listSandboxNetns(names)) ids.add(id);
  for (const id of await listSandboxLinks(names)) ids.add(id);

  for (const id of keep) ids.delete(id);
  // The tenant where a row knows it (an orphan found only by its name has none).
  const tenants = new Map(unfinished.map((r) => [r.id, r.tenant]));
  for (const id of ids) {
    const sessionDir = sessionDirOf(stateDir, id);
    const sessionLog = log.child({ sessionId: id, tenant: tenants.get(id) ?? null });
    // What the ledger recorded, by the names it had then; then whatever carries our prefix.
    const recorded = store.resourcesOf(id);
    let failed = !(await reclaimRecorded(recorded, sessionLog, opts.countKeptDir));
    // Each step on its own: one that fails must not keep the others from running.
    const steps: Array<[string, () => Promise<void>]> = [
      ['sandbox', () => runtime.reclaim(id, sessionDir)],
      ['netns', () => deleteNetns(names.netns(id))],
      ['veth', () => deleteLink(names.hostVeth(id))],
    ];
    if (named.has(id)) steps.push(['key dir', () => removeSessionDir(sessionDir, sessionLog, opts.countKeptDir)]);
    else sessionLog.warn({ sessionDir }, 'a sandbox the store does not name: its directory, if any, is left for the operator');
    for (const [what, step] of steps) {
      try {
        await step();
      } catch (err) {
        failed = true;
        sessionLog.error({ err, what }, 'could not reclaim part of a sandbox left behind; remove it by hand');
      }
    }
    if (!failed) {
      store.forgetResources(id);
      sessionLog.info({ recorded: recorded.length }, 'reclaimed a sandbox left behind by an earlier run');
    }
  }
  // Last, once no sandbox of an earlier run is left: the network policy table is replaced
  // by a fresh, empty one (with it go the entries of the sandboxes just reclaimed). It
  // throws when nft is missing: the orchestrator does not run sandboxes it cannot fence.
  await policy.reclaim();
  const now = new Date().toISOString();
  for (const record of unfinished) {
    // A warm-pool sandbox was never anyone's session: nothing to report, just forget it.
    if (record.pooled) {
      store.delete(record.id);
      continue;
    }
    store.update({
      ...record,
      state: 'destroyed',
      addressIndex: null,
      updatedAt: now,
      error: record.error ?? 'the orchestrator restarted; the sandbox was reclaimed',
    });
  }
  store.pruneDestroyed(new Date(Date.now() - 24 * 3600 * 1000));
  return ids.size;
}
