import type { FastifyInstance } from 'fastify';
import type { SnapshotView } from '../../snapshots/snapshots.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { sessionIdParams } from '../schemas.js';

/** What the snapshot routes use: the Snapshots service (snapshots/snapshots.ts), always for the request's tenant. */
export interface SnapshotDirectory {
  create(tenant: string, sessionId: string, body: { name?: unknown }): Promise<SnapshotView>;
  list(tenant: string): SnapshotView[];
  get(tenant: string, id: string): SnapshotView;
  delete(tenant: string, id: string): Promise<SnapshotView>;
}

/** A snapshot as the API shows it (the client's SnapshotInfo is generated from it). */
export const snapshotSchema = {
  type: 'object',
  required: ['id', 'name', 'sessionId', 'template', 'runtime', 'bytes', 'createdAt'],
  properties: {
    id: { type: 'string', description: 'snap-<16 letters or digits>: what POST /v1/sessions {snapshot} names' },
    name: { type: ['string', 'null'], description: "The name given at create (null: none); unique among the tenant's snapshots" },
    sessionId: { type: 'string', description: 'The session it was taken of (which may have ended since: the snapshot stays)' },
    template: { type: 'string', description: 'The template of that session, and of every session started from it' },
    runtime: { type: 'string', description: 'The runtime that took it (only that runtime can start sessions from it)' },
    bytes: { type: 'integer', description: "Bytes of host disk its files hold, counted against the tenant's SBX_SNAPSHOT_QUOTA_MIB" },
    createdAt: { type: 'string', format: 'date-time' },
  },
} as const;

/** POST /v1/sessions/:id/snapshots. The name is checked by the service (the message says what is allowed). */
export const createSnapshotBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    name: {
      type: 'string',
      maxLength: 200,
      description: "1-63 letters, digits, '-', '_' or '.', starting with a letter or digit; unique per tenant (optional)",
    },
  },
} as const;

const idParams = { type: 'object', required: ['id'], properties: { id: { type: 'string', minLength: 1, maxLength: 200 } } } as const;
const errors = { 400: { $ref: 'Error#' }, 401: { $ref: 'Error#' }, 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' } };

/**
 * Snapshots (docs/snapshots.md): a running session's desktop saved (memory and disk), from
 * which new sessions start with POST /v1/sessions {snapshot}. Every route works on the
 * request's tenant only: another tenant's snapshot is a 404, never listed.
 */
export async function snapshotRoutes(app: FastifyInstance, opts: { snapshots: SnapshotDirectory }): Promise<void> {
  const { snapshots } = opts;

  app.post<{ Params: { id: string }; Body: { name?: string } | undefined }>(
    '/v1/sessions/:id/snapshots',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'Snapshot a running session: its memory and disk saved; it pauses for a moment and runs on',
        tags: ['snapshots'],
        params: sessionIdParams,
        body: createSnapshotBody,
        response: { 201: snapshotSchema, ...errors, 410: { $ref: 'Error#' }, 413: { $ref: 'Error#' }, 503: { $ref: 'Error#' } },
      },
    },
    async (request, reply) => reply.status(201).send(await snapshots.create(request.tenant, request.params.id, request.body ?? {})),
  );

  app.get(
    '/v1/snapshots',
    {
      schema: {
        summary: "List the tenant's snapshots",
        tags: ['snapshots'],
        response: {
          200: { type: 'object', required: ['snapshots'], properties: { snapshots: { type: 'array', items: snapshotSchema } } },
          401: { $ref: 'Error#' },
        },
      },
    },
    async (request) => ({ snapshots: snapshots.list(request.tenant) }),
  );

  app.get<{ Params: { id: string } }>(
    '/v1/snapshots/:id',
    { schema: { summary: 'Describe a snapshot', tags: ['snapshots'], params: idParams, response: { 200: snapshotSchema, ...errors } } },
    async (request) => snapshots.get(request.tenant, request.params.id),
  );

  app.delete<{ Params: { id: string } }>(
    '/v1/snapshots/:id',
    {
      schema: {
        summary: 'Delete a snapshot and its files (sessions started from it go on)',
        tags: ['snapshots'],
        params: idParams,
        response: { 200: snapshotSchema, ...errors },
      },
    },
    async (request) => snapshots.delete(request.tenant, request.params.id),
  );
}
