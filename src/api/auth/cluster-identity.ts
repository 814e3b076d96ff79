import { isIP } from 'node:net';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ClusterCredentialError } from '../../errors.js';
import { TENANT_PATTERN } from './key-store.js';

/**
 * A node of a cluster (`sbx node`, docs/cluster.md) takes requests from its gateways only.
 * Each carries the cluster's credential; the gateway has checked the client's API key and
 * names the tenant it found. The client's key never reaches a node.
 */
export const CLUSTER_SECRET_HEADER = 'x-sbx-cluster-secret';
export const TENANT_HEADER = 'x-sbx-tenant';
export const API_KEY_ID_HEADER = 'x-sbx-api-key-id';
/** On a create (and a run that creates): the id the gateway placed in the directory. */
export const SESSION_ID_HEADER = 'x-sbx-session-id';
/** With it: the gateway takes the create's answer under a warm sandbox's own id instead. */
export const ACCEPT_POOLED_ID_HEADER = 'x-sbx-accept-pooled-id';

/** The credential of a cluster: long enough that it cannot be guessed. */
export const MIN_CLUSTER_SECRET_LENGTH = 32;

export interface ClusterAuth {
  secret: string;
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

/** A header's single value (a repeated header is refused, not joined). */
function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' ? value : undefined;
}

/** Throws unless the request carries the cluster's credential (compared as digests, in constant time). */
export function assertFromGateway(request: FastifyRequest, cluster: ClusterAuth): void {
  const presented = headerValue(request, CLUSTER_SECRET_HEADER);
  if (presented === undefined || !timingSafeEqual(digest(presented), digest(cluster.secret))) {
    throw new ClusterCredentialError(
      `this is a node of a cluster: it answers its gateways only (the ${CLUSTER_SECRET_HEADER} header); send requests to a gateway`,
    );
  }
}

/** The tenant and key id a gateway named, if any (a malformed tenant is refused). */
export function gatewayIdentity(request: FastifyRequest): { tenant: string; keyId: string | undefined } | undefined {
  const tenant = headerValue(request, TENANT_HEADER);
  if (tenant === undefined) return undefined;
  if (!TENANT_PATTERN.test(tenant)) throw new ClusterCredentialError(`the ${TENANT_HEADER} header is not a tenant name`);
  const keyId = headerValue(request, API_KEY_ID_HEADER);
  return { tenant, keyId: keyId !== undefined && /^[a-z0-9]{12}$/.test(keyId) ? keyId : undefined };
}

/**
 * The client's address as the gateway saw it (it sets x-forwarded-for to one address, never
 * appends): trusted only once the request proved it comes from a gateway, and only if it is
 * an address (what a guest port's server is told in its own x-forwarded-for).
 */
export function forwardedClient(request: FastifyRequest): string | undefined {
  const value = headerValue(request, 'x-forwarded-for');
  return value !== undefined && isIP(value) !== 0 ? value : undefined;
}

/** The session id a gateway placed for this create, if it named one. */
export function placedSessionId(request: FastifyRequest): string | undefined {
  return headerValue(request, SESSION_ID_HEADER);
}

/** Whether the gateway of a placed create takes a warm sandbox's own id (it renames its directory row). */
export function acceptsPooledId(request: FastifyRequest): boolean {
  return headerValue(request, ACCEPT_POOLED_ID_HEADER) === '1';
}
