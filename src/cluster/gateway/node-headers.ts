/**
 * The headers a gateway sends a node (docs/cluster.md, "the gateway -> node protocol").
 *
 * A client's own `x-sbx-*` headers are dropped: they are the protocol's, and nothing a client
 * sends may name a tenant, a session id or the cluster's secret to a node. Its Authorization
 * never reaches a node either (a node never sees client keys). Host is the client's, so URLs
 * a node builds (views, links) point at the gateway; x-forwarded-for is the client's address
 * as this gateway saw it (set, not appended: a node trusts only what a gateway says).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { isIPv4 } from 'node:net';
import type { FastifyRequest } from 'fastify';

export const SECRET_HEADER = 'x-sbx-cluster-secret';
export const TENANT_HEADER = 'x-sbx-tenant';
export const KEY_ID_HEADER = 'x-sbx-api-key-id';
export const SESSION_ID_HEADER = 'x-sbx-session-id';
/** On a create: the gateway takes another id than the placed one in the answer (a warm sandbox's own). */
export const ACCEPT_POOLED_ID_HEADER = 'x-sbx-accept-pooled-id';

export interface NodeHeaderOptions {
  readonly secret: string;
  /** Absent on open routes (view tokens, link-token pages): the node checks the token itself. */
  readonly tenant?: string | undefined;
  readonly keyId?: string | null | undefined;
  /** The id a create was placed under (POST /v1/sessions, POST /v1/runs without sessionId). */
  readonly sessionId?: string;
}

/** Hop-by-hop and our own: never copied from the client. */
const DROPPED = new Set(['authorization', 'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'x-forwarded-for']);

/** The client's headers as a node gets them (the body's own headers, content-length and -type, are kept). */
export function nodeHeaders(request: FastifyRequest, from: IncomingHttpHeaders, opts: NodeHeaderOptions): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(from)) {
    if (value === undefined || DROPPED.has(name) || name.startsWith('x-sbx-')) continue;
    headers[name] = value;
  }
  headers[SECRET_HEADER] = opts.secret;
  if (opts.tenant !== undefined && opts.tenant !== '') headers[TENANT_HEADER] = opts.tenant;
  if (opts.keyId) headers[KEY_ID_HEADER] = opts.keyId;
  if (opts.sessionId !== undefined) headers[SESSION_ID_HEADER] = opts.sessionId;
  const address = request.socket?.remoteAddress ?? request.ip;
  if (address) headers['x-forwarded-for'] = address.startsWith('::ffff:') && isIPv4(address.slice(7)) ? address.slice(7) : address;
  return headers;
}
