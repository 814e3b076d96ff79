/**
 * /v1/volumes through a gateway (docs/volumes.md, "through a gateway"). A volume is a file on
 * one node's disk: a create reserves its name in the directory on the least-used node that can
 * take it (one statement, which also checks the tenant's quota in the cluster) and asks that
 * node to make it, retried on another node when one fails (at most 3; a node's 4xx is the
 * answer); GET and DELETE of a volume go to its node after the directory's tenant check; the
 * list is the directory's, each volume described by its node. Another tenant's volume is the
 * node's own 404: the directory is keyed by tenant, and nothing a client sends names a node.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SMALL_BODY_LIMIT_BYTES } from '../../api/limits.js';
import { createVolumeBody } from '../../api/routes/volumes.js';
import { OrchestratorError } from '../../errors.js';
import { checkVolumeName, checkVolumeSize, checkVolumeTotals, VOLUME_NAME_PATTERN } from '../../volumes/volume-names.js';
import { retryChoices, type Choice } from '../place-retry.js';
import type { NodeRecord, VolumeEntry } from '../store/cluster-store.js';
import { NodeRefusal, placementRuntime } from './create.js';
import { NodeFailedError, VolumeUnavailableError } from './errors.js';
import { nodeUrl, type NodeAnswer } from './node-client.js';
import { jsonHeaders, sendAnswer, type SessionRouteDeps } from './session-routes.js';

/** A node's list is read from memory: one that takes longer is not answering. */
const LIST_TIMEOUT_MS = 5_000;

type Listed = { name: string } & Record<string, unknown>;

/** POST /v1/volumes and GET /v1/volumes: JSON routes (the node's schema: the same 400s). */
export async function volumeJsonRoutes(app: FastifyInstance, deps: SessionRouteDeps): Promise<void> {
  app.post<{ Body: { name: string; sizeMiB: number } }>(
    '/v1/volumes',
    { bodyLimit: SMALL_BODY_LIMIT_BYTES, schema: { body: createVolumeBody } },
    async (request, reply) => sendAnswer(reply, await createVolume(request, deps)),
  );
  app.get('/v1/volumes', async (request) => ({ volumes: await listVolumes(request, deps) }));
}

/** GET and DELETE /v1/volumes/:name: forwarded to the volume's node. */
export async function volumeProxyRoutes(app: FastifyInstance, deps: SessionRouteDeps): Promise<void> {
  const { state, forwarder, logger } = deps;
  const proxy = async (request: FastifyRequest<{ Params: { name: string } }>, reply: FastifyReply) => {
    const { name } = request.params;
    const tenant = request.tenant;
    const target = await volumeNode(deps, tenant, name);
    if (request.method !== 'DELETE') return forwarder.forward(request, reply, target, { family: 'volumes', tenant });
    // Deleted on its node: the name is free in the cluster (a failure to say so is logged; the row then names a volume its node no longer has).
    const inspect = async (status: number) => {
      if (status !== 200) return;
      await state
        .call('dropVolume', (store) => store.dropVolume(tenant, name))
        .catch((err: unknown) => logger.warn({ err, volume: name }, 'could not drop a deleted volume'));
    };
    return forwarder.forward(request, reply, target, { family: 'volumes', tenant, inspect });
  };
  app.get('/v1/volumes/:name', proxy);
  app.delete('/v1/volumes/:name', proxy);
}

/** The node of the tenant's volume `name`: a 404 as the node says it when the tenant has none by that name (yet). */
async function volumeNode(deps: SessionRouteDeps, tenant: string, name: string): Promise<NodeRecord> {
  const entry = VOLUME_NAME_PATTERN.test(name) ? await deps.state.call('lookupVolume', (store) => store.lookupVolume(tenant, name)) : undefined;
  if (!entry || entry.state !== 'ready') throw new OrchestratorError('volume_not_found', `no volume ${JSON.stringify(name)}`);
  const node = await deps.state.node(entry.node);
  if (!node || node.state !== 'up' || !node.healthy) throw new VolumeUnavailableError(name, entry.node);
  return node;
}

async function createVolume(request: FastifyRequest<{ Body: { name: string; sizeMiB: number } }>, deps: SessionRouteDeps): Promise<NodeAnswer> {
  const { state, client, settings, secret, logger } = deps;
  const tenant = request.tenant;
  // Checked before the directory is written, as the node checks them (the same 400s).
  const name = checkVolumeName(request.body.name);
  const sizeMiB = checkVolumeSize(request.body.sizeMiB, settings.volumes);
  const runtime = placementRuntime(
    settings,
    (await state.nodes()).filter((node) => node.state === 'up'),
  );
  const quota = { count: settings.volumes.quotaCount, mib: settings.volumes.quotaMiB };
  const body = Buffer.from(JSON.stringify({ name, sizeMiB }));
  const drop = () =>
    state
      .call('dropVolume', (store) => store.dropVolume(tenant, name))
      .catch((err: unknown) => logger.error({ err, volume: name }, 'could not drop a failed volume'));
  const choose = async (exclude: ReadonlySet<string>): Promise<Choice<NodeRecord>> => {
    const outcome = await state.call('reserveVolume', (store) => store.reserveVolume({ tenant, name, sizeMiB, runtime, quota }, [...exclude]));
    if (outcome.reserved) {
      const node = await state.node(outcome.node).catch(async (err: unknown) => {
        await drop();
        throw err;
      });
      if (node) return { ok: true, node };
      await drop();
      return { ok: false, reason: `node ${outcome.node} left the registry` };
    }
    if (outcome.why === 'exists') throw new OrchestratorError('volume_exists', `volume ${name} exists already`);
    if (outcome.why === 'quota') checkVolumeTotals(outcome.volumes, outcome.mib, sizeMiB, settings.volumes);
    return {
      ok: false,
      reason: `no node can take this volume: none is up, heartbeating, undrained and runs ${runtime}${exclude.size > 0 ? ' but those tried' : ''}`,
    };
  };
  const attempt = async (node: NodeRecord): Promise<NodeAnswer> => {
    const headers = jsonHeaders(request, secret, body);
    let answer: NodeAnswer;
    // The volume may exist on the node: asked to delete it (best effort), so no file is left without a row.
    const undo = () => {
      const { 'content-length': _length, 'content-type': _type, ...rest } = headers;
      client
        .request({ method: 'DELETE', url: nodeUrl(node.url, `/v1/volumes/${name}`), headers: rest, node: node.name })
        .catch((cause: unknown) => logger.warn({ err: cause, volume: name, node: node.name }, 'could not delete a volume whose create broke off'));
    };
    try {
      answer = await client.request({ method: 'POST', url: nodeUrl(node.url, '/v1/volumes'), headers, body, node: node.name });
    } catch (err) {
      await drop();
      if (err instanceof NodeFailedError) undo();
      throw err;
    }
    if (answer.status !== 201) {
      await drop();
      throw new NodeRefusal(node.name, answer);
    }
    try {
      await state.call('confirmVolume', (store) => store.confirmVolume(tenant, name));
    } catch (err) {
      // Made on the node but not recorded: undone on both sides rather than a row left 'creating' for good.
      await drop();
      undo();
      throw err;
    }
    return answer;
  };
  try {
    return (await retryChoices(choose, (node) => node.name, attempt)).result;
  } catch (err) {
    // A node's 4xx is the client's answer, as the node gave it; nobody able to take it is the 503 saying why (NoNodeError).
    if (err instanceof NodeRefusal && err.status < 500) return err.answer;
    throw err;
  }
}

/**
 * The tenant's volumes: the directory's, each as its node describes it (one request per node
 * holding any); a volume whose node does not answer is listed from the directory, saying so.
 */
async function listVolumes(request: FastifyRequest, deps: SessionRouteDeps): Promise<Listed[]> {
  const { state, client, secret, logger } = deps;
  const entries = (await state.call('listVolumes', (store) => store.listVolumes(request.tenant))).filter((entry) => entry.state === 'ready');
  const byNode = new Map<string, VolumeEntry[]>();
  for (const entry of entries) byNode.set(entry.node, [...(byNode.get(entry.node) ?? []), entry]);
  const headers = jsonHeaders(request, secret, undefined);
  const lists = await Promise.all(
    [...byNode].map(async ([name, mine]) => {
      const node = await state.node(name);
      let described = new Map<string, Listed>();
      if (node && node.state === 'up' && node.healthy) {
        try {
          const answer = await client.request({ method: 'GET', url: nodeUrl(node.url, '/v1/volumes'), headers, node: name, timeoutMs: LIST_TIMEOUT_MS });
          const listed = answer.status === 200 ? ((JSON.parse(answer.body.toString('utf8')) as { volumes?: Listed[] }).volumes ?? []) : [];
          described = new Map(listed.map((volume) => [volume.name, volume]));
        } catch (err) {
          logger.warn({ err, node: name }, 'a node did not answer the volume list');
        }
      }
      return mine.map(
        (entry): Listed =>
          described.get(entry.name) ?? {
            name: entry.name,
            sizeMiB: entry.sizeMiB,
            usedBytes: 0,
            createdAt: entry.createdAt.toISOString(),
            mountedBy: [],
            unavailable: `its node ${name} is not answering`,
          },
      );
    }),
  );
  return lists.flat().sort((a, b) => a.name.localeCompare(b.name));
}
