import type { FastifyReply, FastifyRequest } from 'fastify';
import { LimitError } from '../errors.js';
import { KeyedSlots } from '../util/slots.js';
import { releaseRequestSlot } from './tenant-request-limits.js';

/** SBX_TENANT_MAX_STREAMS by default: a dashboard or two per session of a busy tenant. */
export const DEFAULT_TENANT_MAX_STREAMS = 8;

export class StreamLimitError extends LimitError {
  constructor(message: string) {
    super(message, 'tenant_stream_limit', 5);
  }
}

/**
 * Server-Sent Event streams (the screen stream, a run's events) live as long as their client
 * wants, so they do not hold one of the tenant's request slots (a few dashboards would
 * otherwise starve its agents of requests); they have a cap of their own instead, per tenant.
 * A stream's slot is taken in one synchronous step with the check, before the route awaits
 * anything, and is released once, on whichever way the stream ends.
 */
export class StreamSlots {
  private readonly perTenant: KeyedSlots;

  constructor(readonly maxPerTenant: number) {
    if (!Number.isInteger(maxPerTenant) || maxPerTenant < 1)
      throw new Error(`the tenant stream limit must be a whole number of at least 1, got ${maxPerTenant}`);
    this.perTenant = new KeyedSlots(() => maxPerTenant);
  }

  /**
   * Opens a stream of `request`'s tenant: takes a stream slot (or throws a 429), and gives back
   * the request slot the request took (its stream slot counts it from now on). The stream
   * slot is released when the response closes; the returned function releases it earlier
   * (a failure before the stream started).
   */
  open(request: FastifyRequest, reply: FastifyReply): () => void {
    const tenant = request.tenant;
    if (!this.perTenant.fits(tenant)) {
      throw new StreamLimitError(
        `too many event streams: tenant "${tenant}" has ${this.perTenant.count(tenant)} open, its limit (SBX_TENANT_MAX_STREAMS); close one, then retry`,
      );
    }
    const release = this.perTenant.take(tenant);
    // The response's close comes in every case: ended, failed, or the client gone.
    if (reply.raw.closed || request.raw.socket?.destroyed === true) release();
    else reply.raw.once('close', release);
    releaseRequestSlot(request);
    return release;
  }

  /** Streams open now (tests, metrics). */
  openOf(tenant: string): number {
    return this.perTenant.count(tenant);
  }
}
