import type { FastifyInstance } from 'fastify';
import { NotFoundError } from '../../errors.js';
import {
  DEFAULT_LINK_TTL_SECONDS,
  LINK_PURPOSES,
  MAX_LINK_TTL_SECONDS,
  MIN_LINK_TTL_SECONDS,
  type LinkPurpose,
  type LinkTokens,
} from '../links/link-tokens.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { sessionIdParams } from '../schemas.js';

export interface LinkRouteOptions {
  links: LinkTokens;
  /** Does the tenant own this session, or (for a trajectory kept after its record) its trajectory? */
  owns(tenant: string, sessionId: string, purpose: LinkPurpose): boolean;
}

/** Where each purpose's link leads. */
const PAGES: Record<LinkPurpose, (sessionId: string) => string> = {
  trajectory: (id) => `/v1/sessions/${id}/trajectory/view`,
  terminal: (id) => `/v1/sessions/${id}/terminal`,
};

const errors = { 400: { $ref: 'Error#' }, 401: { $ref: 'Error#' }, 404: { $ref: 'Error#' } };

/**
 * POST /v1/sessions/:id/links: a short-lived link a person can open in a browser (which
 * cannot send the API key header); DELETE .../links/:linkId revokes it. Only an API-key (or
 * keyless local) request makes or revokes links: a link token cannot make another.
 */
export async function linkRoutes(app: FastifyInstance, opts: LinkRouteOptions): Promise<void> {
  app.post<{ Params: { id: string }; Body: { purpose: LinkPurpose; ttlSeconds?: number } }>(
    '/v1/sessions/:id/links',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'A link to a page of the session for a browser (the trajectory viewer, or a terminal), with a short-lived token in its URL',
        tags: ['trajectory'],
        params: sessionIdParams,
        body: {
          type: 'object',
          required: ['purpose'],
          additionalProperties: false,
          properties: {
            purpose: { type: 'string', enum: [...LINK_PURPOSES] },
            ttlSeconds: { type: 'integer', minimum: MIN_LINK_TTL_SECONDS, maximum: MAX_LINK_TTL_SECONDS, default: DEFAULT_LINK_TTL_SECONDS },
          },
        },
        response: {
          201: {
            type: 'object',
            properties: {
              id: { type: 'string', description: "The link's id, to revoke it" },
              purpose: { type: 'string' },
              url: { type: 'string', description: "The page, absolute (from the request's Host), its token in the query" },
              path: { type: 'string', description: 'The same without scheme and host' },
              expiresAt: { type: 'string', format: 'date-time' },
            },
          },
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const { purpose, ttlSeconds = DEFAULT_LINK_TTL_SECONDS } = request.body;
      if (!opts.owns(request.tenant, id, purpose)) throw new NotFoundError(`session ${id} does not exist`);
      const { record, token } = opts.links.create(request.tenant, id, purpose, ttlSeconds);
      const path = `${PAGES[purpose](id)}?token=${token}`;
      return reply.status(201).send({ id: record.id, purpose, url: `${request.protocol}://${request.host}${path}`, path, expiresAt: record.expiresAt });
    },
  );

  app.delete<{ Params: { id: string; linkId: string } }>(
    '/v1/sessions/:id/links/:linkId',
    {
      schema: {
        summary: 'Revoke a link: its token opens nothing from now on (idempotent)',
        tags: ['trajectory'],
        params: { ...sessionIdParams, required: ['id', 'linkId'], properties: { ...sessionIdParams.properties, linkId: { type: 'string', maxLength: 32 } } },
        response: { 204: { type: 'null', description: 'Revoked' }, ...errors },
      },
    },
    async (request, reply) => {
      const { id, linkId } = request.params;
      if (!opts.links.revoke(request.tenant, id, linkId)) throw new NotFoundError(`session ${id} has no link ${linkId}`);
      return reply.status(204).send();
    },
  );
}
