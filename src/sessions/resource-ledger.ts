import type { Logger } from 'pino';
import { deleteLink, deleteNetns } from '../network/netns.js';
import { RECLAIM_STAGES, type ReclaimContext, type ReclaimStage, type ResourceKindEntry } from '../runtimes/entry.js';
import { RUNTIMES, type RuntimeResourceKind } from '../runtimes/registered.js';
import { removeSessionDir, type CountKeptDir } from './session-dir.js';

/**
 * The ledger: each host resource a session takes is written to the store *before* it is
 * taken, by kind and by its own name. The session layer records its own kinds (below); a
 * runtime records the kinds its registry entry declares, each with its reclaimer (e.g. the
 * container runtime's `container`, `<runc root>/<id>`, deleted with runc). A crash at any
 * moment therefore leaves a record of everything that may exist, under the names it was given
 * then: start-up reconciliation reclaims by the ledger first (even if the resource prefix or
 * another setting changed since), and by our naming prefix second.
 */
const SESSION_KINDS = {
  /** The sandbox's network namespace, by name. */
  netns: { stage: 'network', reclaim: (name) => deleteNetns(name) },
  /** The host's end of its veth. */
  veth: { stage: 'network', reclaim: (name) => deleteLink(name) },
  /** The session dir (keys, config). Never through a mount: see removeSessionDir. */
  'key-dir': { stage: 'session-dir', reclaim: (name, ctx) => ctx.removeDir(name) },
} satisfies Record<string, ResourceKindEntry>;

export type SessionResourceKind = keyof typeof SESSION_KINDS;
/** Every kind the store's ledger holds. */
export type ResourceKind = SessionResourceKind | RuntimeResourceKind;

function kindEntry(kind: string): ResourceKindEntry | undefined {
  return (SESSION_KINDS as Record<string, ResourceKindEntry>)[kind] ?? RUNTIMES.resourceKind(kind);
}

/** The order of reclaiming: by stage (processes first, see RECLAIM_STAGES), then by kind as registered. */
function reclaimOrder(): string[] {
  const taken = RUNTIMES.resourceKinds().find(({ kind }) => Object.hasOwn(SESSION_KINDS, kind));
  if (taken) throw new Error(`a runtime registers the resource kind ${taken.kind}, which the session layer records itself`);
  const kinds: Array<{ kind: string; stage: ReclaimStage }> = [
    ...RUNTIMES.resourceKinds(),
    ...Object.entries(SESSION_KINDS).map(([kind, entry]) => ({ kind, stage: entry.stage })),
  ];
  const stageIndex = (stage: ReclaimStage) => RECLAIM_STAGES.indexOf(stage);
  return kinds
    .map((k, i) => ({ ...k, i }))
    .sort((a, b) => stageIndex(a.stage) - stageIndex(b.stage) || a.i - b.i)
    .map((k) => k.kind);
}
export const RECLAIM_ORDER: readonly string[] = reclaimOrder();
const ORDER = new Map(RECLAIM_ORDER.map((kind, i) => [kind, i]));

export async function reclaimRecorded(entries: ReadonlyArray<{ kind: ResourceKind; name: string }>, log: Logger, countKept?: CountKeptDir): Promise<boolean> {
  const sorted = [...entries].sort(
    (a, b) => (ORDER.get(a.kind) ?? 99) - (ORDER.get(b.kind) ?? 99) || b.name.length - a.name.length, // deeper mounts first
  );
  const ctx: ReclaimContext = { log, removeDir: (dir) => removeSessionDir(dir, log, countKept) };
  let complete = true;
  for (const entry of sorted) {
    const kind = kindEntry(entry.kind);
    if (!kind) {
      // A kind no registered runtime declares (one removed from this build): nothing to run.
      log.warn({ kind: entry.kind, name: entry.name }, 'a recorded resource of a kind no runtime reclaims; check for it by hand');
      continue;
    }
    try {
      await kind.reclaim(entry.name, ctx);
    } catch (err) {
      complete = false;
      log.error({ err, kind: entry.kind, name: entry.name }, 'could not reclaim a recorded resource; remove it by hand');
    }
  }
  return complete;
}
