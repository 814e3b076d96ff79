import type { FastifyInstance } from 'fastify';
import type { VolumeView } from '../../volumes/volumes.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';

/** What the volume routes use: the Volumes service (volumes/volumes.ts), always for the request's tenant. */
export interface VolumeDirectory {
  create(tenant: string, body: { name?: unknown; sizeMiB?: unknown }): Promise<VolumeView>;
  list(tenant: string): VolumeView[];
  get(tenant: string, name: string): VolumeView;
  delete(tenant: string, name: string): Promise<VolumeView>;
}

/** A volume as the API shows it (the client's VolumeInfo is generated from it). */
export const volumeSchema = {
  type: 'object',
  required: ['name', 'sizeMiB', 'usedBytes', 'createdAt', 'mountedBy'],
  properties: {
    name: { type: 'string' },
    sizeMiB: { type: 'integer', description: 'Its size: the most it holds, and the most of the host disk it takes' },
    usedBytes: { type: 'integer', description: 'The bytes of host disk its file holds now (sparse: grows as it is written)' },
    createdAt: { type: 'string', format: 'date-time' },
    mountedBy: {
      type: 'array',
      description: 'The sessions that have it mounted now',
      items: { type: 'object', required: ['sessionId', 'readOnly'], properties: { sessionId: { type: 'string' }, readOnly: { type: 'boolean' } } },
    },
    unavailable: {
      type: 'string',
      description: "Through a cluster's gateway, in a list: its node is not answering (sizeMiB and createdAt are the directory's; the data is on that node)",
    },
  },
} as const;

/** POST /v1/volumes. Bounds are checked by the service (the message names the setting), not here. */
export const createVolumeBody = {
  type: 'object',
  required: ['name', 'sizeMiB'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', description: '1-63 letters, digits, "-" or "_", starting with a letter or digit; unique per tenant' },
    sizeMiB: { type: 'integer', description: 'Its size in MiB (16 to SBX_VOLUME_MAX_MIB), counted against the tenant quota SBX_VOLUME_QUOTA_MIB' },
  },
} as const;

const nameParams = { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1, maxLength: 200 } } } as const;
const errors = { 400: { $ref: 'Error#' }, 401: { $ref: 'Error#' }, 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 413: { $ref: 'Error#' } };

/**
 * /v1/volumes (docs/volumes.md): disks of a tenant that outlive sessions. Every route works on
 * the request's tenant only: another tenant's volume is a 404, never listed.
 */
export async function volumeRoutes(app: FastifyInstance, opts: { volumes: VolumeDirectory }): Promise<void> {
  const { volumes } = opts;

  app.post<{ Body: { name: string; sizeMiB: number } }>(
    '/v1/volumes',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'Create a volume: an empty file system of sizeMiB that sessions mount (volumes at create)',
        tags: ['volumes'],
        body: createVolumeBody,
        response: { 201: volumeSchema, ...errors, 503: { $ref: 'Error#' } },
      },
    },
    async (request, reply) => reply.status(201).send(await volumes.create(request.tenant, request.body)),
  );

  app.get(
    '/v1/volumes',
    {
      schema: {
        summary: "List the tenant's volumes",
        tags: ['volumes'],
        response: { 200: { type: 'object', required: ['volumes'], properties: { volumes: { type: 'array', items: volumeSchema } } }, 401: { $ref: 'Error#' } },
      },
    },
    async (request) => ({ volumes: volumes.list(request.tenant) }),
  );

  app.get<{ Params: { name: string } }>(
    '/v1/volumes/:name',
    { schema: { summary: 'Describe a volume', tags: ['volumes'], params: nameParams, response: { 200: volumeSchema, ...errors } } },
    async (request) => volumes.get(request.tenant, request.params.name),
  );

  app.delete<{ Params: { name: string } }>(
    '/v1/volumes/:name',
    {
      schema: {
        summary: 'Delete a volume and its data (409 volume_in_use while a session has it mounted)',
        tags: ['volumes'],
        params: nameParams,
        response: { 200: volumeSchema, ...errors },
      },
    },
    async (request) => volumes.delete(request.tenant, request.params.name),
  );
}
