/**
 * A create placed, tried, and retried elsewhere when the chosen node fails it (issue 22).
 *
 * A snapshot is seconds old by the time a node is asked: the node may be exhausted by then,
 * or gone. Such a node is left out of the next choice, at most `maxTries` nodes are asked,
 * and a create that nobody can take ends in a 503 that says why (which constraint ruled out
 * how many nodes, and what each tried node answered). A 4xx from a node is the request's
 * fault, not the node's: another node would answer the same, so it is not retried.
 */
import { httpStatusOf } from '../api/errors.js';
import { OrchestratorError, UnavailableError } from '../errors.js';
import { CONSTRAINTS, place, type Constraint, type NodeSnapshot, type PlacementOptions, type PlacementRequest } from './placement.js';

export const DEFAULT_MAX_TRIES = 3;

export interface AttemptFailure {
  readonly node: string;
  readonly message: string;
}

/**
 * An attempt's failure with an HTTP status of its own (a node's answer relayed, or a failure
 * that is no node's fault): below 500 it ends the retries, as a 4xx of ours does.
 */
export class AttemptFailed extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** Nobody could take the create: a 503 whose message says why. */
export class NoNodeError extends UnavailableError {
  constructor(
    message: string,
    /** Nodes ruled out by each constraint at the last choice (none when the tries ran out). */
    readonly rejected: Readonly<Record<Constraint, number>>,
    readonly failures: readonly AttemptFailure[],
  ) {
    super(message);
  }
}

export interface RetryOptions extends Omit<PlacementOptions, 'exclude'> {
  readonly maxTries?: number;
}

export interface Placed<T> {
  readonly node: NodeSnapshot;
  readonly result: T;
  /** What the nodes asked before this one answered. */
  readonly failures: readonly AttemptFailure[];
}

/** One choice: a node, or why none (placement's reason, its counts when it has them). */
export type Choice<N> =
  { readonly ok: true; readonly node: N } | { readonly ok: false; readonly reason: string; readonly rejected?: Readonly<Record<Constraint, number>> };

/**
 * Choose a node, call `attempt` on it; on failure choose again without the nodes that failed.
 * `loadNodes` is read before every choice, so a retry sees the directory as it is then.
 */
export async function placeWithRetries<T>(
  request: PlacementRequest,
  loadNodes: () => readonly NodeSnapshot[] | Promise<readonly NodeSnapshot[]>,
  attempt: (node: NodeSnapshot) => Promise<T>,
  options: RetryOptions = {},
): Promise<Placed<T>> {
  const choose = async (exclude: ReadonlySet<string>): Promise<Choice<NodeSnapshot>> => place(request, await loadNodes(), { ...options, exclude });
  return retryChoices(choose, (node) => node.name, attempt, options.maxTries);
}

/**
 * The retry loop on its own, for a caller whose choice is made elsewhere (the gateway's is
 * the store's placement transaction, which also commits it). A 4xx of `attempt` is thrown as
 * is; anything else leaves that node out of the next choice, at most `maxTries` times.
 */
export async function retryChoices<N, T>(
  choose: (exclude: ReadonlySet<string>) => Promise<Choice<N>>,
  nameOf: (node: N) => string,
  attempt: (node: N) => Promise<T>,
  maxTriesOption?: number,
): Promise<{ readonly node: N; readonly result: T; readonly failures: readonly AttemptFailure[] }> {
  const maxTries = Math.max(1, maxTriesOption ?? DEFAULT_MAX_TRIES);
  const exclude = new Set<string>();
  const failures: AttemptFailure[] = [];
  const none = Object.fromEntries(CONSTRAINTS.map((constraint) => [constraint, 0])) as Record<Constraint, number>;
  while (failures.length < maxTries) {
    const choice = await choose(exclude);
    if (!choice.ok) throw new NoNodeError(withFailures(choice.reason, failures), choice.rejected ?? none, failures);
    const name = nameOf(choice.node);
    try {
      return { node: choice.node, result: await attempt(choice.node), failures };
    } catch (error) {
      if (isRequestFault(error)) throw error;
      failures.push({ node: name, message: error instanceof Error ? error.message : String(error) });
      exclude.add(name);
    }
  }
  throw new NoNodeError(withFailures(`no node could take this create in ${maxTries} tries`, failures), none, failures);
}

/** A 4xx: the request's fault, which any other node would answer alike. */
function isRequestFault(error: unknown): boolean {
  if (error instanceof OrchestratorError) return httpStatusOf(error.code) < 500;
  return error instanceof AttemptFailed && error.status < 500;
}

function withFailures(reason: string, failures: readonly AttemptFailure[]): string {
  if (failures.length === 0) return reason;
  return `${reason}; tried: ${failures.map((failure) => `'${failure.node}': ${failure.message}`).join('; ')}`;
}
