/**
 * A create through a gateway (POST /v1/sessions, and POST /v1/runs without a session): a new
 * session id, a node chosen and committed in the directory, the node asked with that id.
 *
 * The store's placement transaction chooses the node and commits the choice (it checks under
 * the node's row lock that the create still fits: two gateways choosing the same node at once
 * never overfill it); place-retry.ts retries elsewhere when a node fails the create (at most
 * 3 nodes, a node's 4xx returned as is, a 503 saying why when nobody can take it). A node
 * that failed is released from the directory before the next try; a node whose connection
 * broke mid-create is also told to destroy the id, in case it made it.
 */
import type { Logger } from 'pino';
import { InvalidRequestError } from '../../errors.js';
import { newSessionId } from '../../sessions/session.js';
import { AttemptFailed, retryChoices, NoNodeError, type Choice } from '../place-retry.js';
import type { PlacementRequest } from '../placement.js';
import type { NodeRecord } from '../store/cluster-store.js';
import { SessionIdTakenError } from '../store/errors.js';
import type { ClusterState } from './cluster-state.js';
import { NodeFailedError } from './errors.js';
import type { GatewayMetrics } from './metrics.js';
import { nodeUrl, type NodeAnswer, type NodeClient } from './node-client.js';
import { AUTO_RUNTIME_ORDER, type GatewaySettings } from './settings.js';
import type { RuntimeName } from '../../runtimes/runtime.js';
import { volumesOf } from './volume-placement.js';

/** A node's refusal (4xx: returned as is) or failure (5xx: retried elsewhere), with its answer. */
export class NodeRefusal extends AttemptFailed {
  constructor(
    readonly node: string,
    readonly answer: NodeAnswer,
  ) {
    super(errorMessageOf(answer), answer.status);
  }
}

/** Session ids tried for one create when the directory holds the first already. */
const MAX_ID_TRIES = 3;

/** Carries a store failure through placeWithRetries, which retries only 5xx (a store failure is no node's fault). */
const NOT_A_NODE_FAILURE = 499;
class StoreFailure extends AttemptFailed {
  constructor(readonly inner: Error) {
    super(inner.message, NOT_A_NODE_FAILURE);
  }
}

export interface CreateDeps {
  readonly state: ClusterState;
  readonly client: NodeClient;
  readonly settings: GatewaySettings;
  readonly metrics: GatewayMetrics;
  readonly logger: Logger;
}

export interface CreateCall {
  readonly tenant: string;
  readonly template: string | undefined;
  /** The node's route (/v1/sessions or /v1/runs) and the headers and body it gets. */
  readonly path: string;
  readonly headers: (sessionId: string) => Record<string, string | string[]>;
  readonly body: Buffer;
  /**
   * The session id a node's 201 names, when the node may give another than the placed one
   * (a create that accepts a warm sandbox's id); absent: always the placed id.
   */
  readonly answeredId?: (answer: NodeAnswer) => string | undefined;
  /** Before the directory row is confirmed: record what the answer names (a run's id). */
  readonly onCreated?: (sessionId: string, answer: NodeAnswer) => Promise<void>;
  /** The create's `volumes` as the client sent them: it is placed on the node that holds them (volume-placement.ts). */
  readonly volumes?: unknown;
}

/** Places the create and asks nodes until one makes it; returns the node's answer (201, or its 4xx). */
export async function placeCreate(deps: CreateDeps, call: CreateCall): Promise<NodeAnswer> {
  const { state, client, metrics } = deps;
  // The node list (at most 1 s old) decides only the request: the template exists, the runtime.
  const request = { ...placementRequest(deps.settings, await state.nodes(), call.template), ...(await volumesOf(state, call.tenant, call.volumes)) };
  let sessionId = newSessionId();
  // The store chooses and commits in one step (its placement transaction, which also counts
  // this gateway's creates in flight: concurrent creates do not herd onto one node).
  const choose = async (exclude: ReadonlySet<string>): Promise<Choice<NodeRecord>> => {
    for (let tries = 1; ; tries++) {
      try {
        const limits = { maxSessionsPerTenant: deps.settings.maxSessionsPerTenant };
        const outcome = await state.call('place', (store) => store.place(sessionId, call.tenant, request, [...exclude], limits));
        return outcome.placed ? { ok: true, node: outcome.node } : { ok: false, reason: outcome.reason };
      } catch (err) {
        // An id the directory holds already (a collision of random ids): nothing was written; a new id.
        if (err instanceof SessionIdTakenError && tries < MAX_ID_TRIES) sessionId = newSessionId();
        else storeFailure(err);
      }
    }
  };
  const attempt = async (node: NodeRecord): Promise<NodeAnswer> => {
    let answer: NodeAnswer;
    try {
      answer = await client.request({ method: 'POST', url: nodeUrl(node.url, call.path), headers: call.headers(sessionId), body: call.body, node: node.name });
    } catch (err) {
      metrics.placementTries.inc({ outcome: 'refused' });
      await release(deps, sessionId);
      if (err instanceof NodeFailedError) destroyQuietly(deps, node, sessionId, call.headers(sessionId));
      throw err;
    }
    if (answer.status === 201) {
      // A node that claimed a warm sandbox answers with that sandbox's id: the row takes it.
      const given = call.answeredId?.(answer) ?? sessionId;
      await call.onCreated?.(given, answer).catch(storeFailure);
      await state
        .call('confirm', (store) => store.confirm(sessionId, given))
        .catch(async (err: unknown) => {
          if (given !== sessionId) {
            destroyQuietly(deps, node, given, call.headers(sessionId));
            await release(deps, sessionId);
          }
          storeFailure(err);
        });
      state.forgetSession(sessionId);
      state.forgetSession(given);
      metrics.placementTries.inc({ outcome: 'created' });
      return answer;
    }
    metrics.placementTries.inc({ outcome: answer.status < 500 ? 'rejected' : 'refused' });
    await release(deps, sessionId);
    throw new NodeRefusal(node.name, answer);
  };
  try {
    return (await retryChoices(choose, (node) => node.name, attempt)).result;
  } catch (err) {
    if (err instanceof StoreFailure) throw err.inner;
    if (err instanceof NodeRefusal && err.status < 500) return err.answer;
    if (err instanceof NoNodeError) metrics.placementsFailed.inc();
    throw err;
  }
}

/**
 * What a create asks of a node: the template it names (else the default), the gateway's
 * runtime (`auto`: the most preferred one an up node runs) and the session size of that
 * runtime. A template no node has is the single host's 400, listing the ones there are.
 */
export function placementRequest(settings: GatewaySettings, nodes: readonly NodeRecord[], template: string | undefined): PlacementRequest {
  const name = template ?? settings.template;
  const up = nodes.filter((node) => node.state === 'up');
  if (!up.some((node) => node.templates.includes(name))) {
    const available = [...new Set(up.flatMap((node) => node.templates))].sort();
    // Said as the node says it (sessions/lifecycle.ts, templates/catalogue.ts).
    throw new InvalidRequestError(`template: unknown template "${name}"; available: ${available.join(', ') || 'none'}`);
  }
  const runtime = placementRuntime(settings, up);
  return { runtime, template: name, memoryMiB: settings.memoryMiB, vcpus: settings.vcpus[runtime] };
}

/** The runtime creates are placed for: the gateway's, or (`auto`) the most preferred one an up node runs. */
export function placementRuntime(settings: Pick<GatewaySettings, 'runtime'>, up: readonly NodeRecord[]): RuntimeName {
  if (settings.runtime !== 'auto') return settings.runtime;
  return AUTO_RUNTIME_ORDER.find((r) => up.some((node) => node.runtimes.includes(r))) ?? AUTO_RUNTIME_ORDER[0]!;
}

function storeFailure(err: unknown): never {
  throw new StoreFailure(err instanceof Error ? err : new Error(String(err)));
}

async function release(deps: CreateDeps, sessionId: string): Promise<void> {
  await deps.state
    .call('release', (store) => store.release(sessionId))
    .catch((err: unknown) => {
      // Left `creating`, its size counts against the node until an operator or the node's reconcile clears it.
      deps.logger.error({ err, sessionId }, 'could not release a failed create from the directory');
    });
}

/** A create whose connection broke may have been made: ask the node to destroy it (best effort, not awaited). */
function destroyQuietly(deps: CreateDeps, node: NodeRecord, sessionId: string, headers: Record<string, string | string[]>): void {
  const { 'content-length': _length, 'content-type': _type, 'x-sbx-session-id': _id, ...rest } = headers;
  deps.client
    .request({ method: 'DELETE', url: nodeUrl(node.url, `/v1/sessions/${sessionId}`), headers: rest, node: node.name })
    .catch((err: unknown) => deps.logger.warn({ err, sessionId, node: node.name }, 'could not destroy a create whose connection broke'));
}

/** The message of a node's error answer, for the 503 that lists what each tried node said. */
function errorMessageOf(answer: NodeAnswer): string {
  try {
    const parsed = JSON.parse(answer.body.toString('utf8')) as { error?: { code?: unknown; message?: unknown } };
    const code = typeof parsed.error?.code === 'string' ? parsed.error.code : 'error';
    const message = typeof parsed.error?.message === 'string' ? parsed.error.message : '';
    return `HTTP ${answer.status} ${code}${message ? `: ${message.slice(0, 300)}` : ''}`;
  } catch {
    return `HTTP ${answer.status}`;
  }
}
