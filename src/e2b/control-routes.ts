import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { NotFoundError, OrchestratorError } from '../errors.js';
import { SESSION_ID_PATTERN } from '../network/names.js';
import type { SessionDirectory, SessionPausing, SessionTimeouts } from '../sessions/ports.js';
import type { SessionView } from '../sessions/session-view.js';
import { e2bFailure, E2bUnsupportedError } from './errors.js';
import type { E2bSandboxStore } from './sandbox-store.js';
import { e2bMetadata, e2bState, parseMetadataFilter, sandboxAccess, sandboxDetail } from './sandbox-view.js';
import type { E2bSettings } from './settings.js';

export interface E2bControlOptions {
  manager: Pick<SessionDirectory, 'create' | 'list' | 'get' | 'destroy'> &
    Pick<SessionTimeouts, 'updateTimeouts'> &
    Pick<SessionPausing, 'pause' | 'resume'> & { tenantOf(id: string): string | undefined };
  store: E2bSandboxStore;
  settings: E2bSettings;
  /** SBX_PORTS_DOMAIN: the `domain` the SDK builds `<port>-<id>.<domain>` hosts with (none: its own E2B_DOMAIN). */
  domain: string | undefined;
}

const idParams = { type: 'object', required: ['sandboxID'], properties: { sandboxID: { type: 'string', maxLength: 64 } } } as const;
const timeoutField = { type: 'integer', minimum: 0, maximum: 7 * 24 * 3600 } as const;
/** E2B's NewSandbox: its fields typed, others (a newer SDK's) allowed and left alone. */
const newSandbox = {
  type: 'object',
  required: ['templateID'],
  properties: {
    templateID: { type: 'string', minLength: 1, maxLength: 128 },
    timeout: timeoutField,
    metadata: { type: 'object', maxProperties: 64, additionalProperties: { type: 'string', maxLength: 1024 } },
    envVars: { type: 'object', maxProperties: 128, additionalProperties: { type: 'string', maxLength: 32768 } },
    allow_internet_access: { type: 'boolean' },
    autoPause: { type: 'boolean' },
    secure: { type: 'boolean' },
  },
} as const;
const timeoutBody = { type: 'object', properties: { timeout: timeoutField } } as const;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

interface NewSandboxBody {
  templateID: string;
  timeout?: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  allow_internet_access?: boolean;
  autoPause?: boolean;
  autoResume?: { enabled?: boolean };
  mcp?: unknown;
  volumeMounts?: unknown;
}

/**
 * E2B's REST API (spec/openapi.yml of e2b-dev/E2B) over our sessions, for the `e2b` SDK's
 * Sandbox class: create, get, list, kill, timeout, connect, pause and resume. A sandbox is
 * an ordinary session of the caller's tenant (GET /v1/sessions lists it; the same limits
 * hold); what E2B adds (the envd access token, env vars, the template name asked for) is in
 * the E2bSandboxStore. The X-API-Key is one of our API keys (api/auth/request-identity.ts).
 * Errors are E2B's `{code, message}` with the HTTP status as code, which the SDK reads.
 */
export async function e2bControlRoutes(app: FastifyInstance, opts: E2bControlOptions): Promise<void> {
  const { manager, store, settings, domain } = opts;
  // E2B's API, not ours: left out of our OpenAPI description (and so of the client's types).
  app.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, hide: true };
  });
  app.setErrorHandler(async (error, request, reply) => {
    const failure = e2bFailure(error);
    if (failure.status >= 500) request.log.warn({ err: error }, 'E2B request failed');
    return reply.status(failure.status).send({ code: failure.status, message: failure.message });
  });
  const config = { e2b: 'api-key' as const };
  const own = (request: FastifyRequest<{ Params: { sandboxID: string } }>): SessionView => {
    const id = request.params.sandboxID;
    if (!SESSION_ID_PATTERN.test(id) || manager.tenantOf(id) !== request.tenant) throw new NotFoundError(`sandbox ${id} not found`);
    const session = manager.get(id);
    // An ended session is no sandbox for E2B (its kill answers false, its connect 404).
    if (e2bState(session) === undefined) throw new NotFoundError(`sandbox ${id} not found (its session is ${session.state})`);
    return session;
  };

  const create = async (request: FastifyRequest<{ Body: NewSandboxBody }>, reply: FastifyReply) => {
    const body = request.body;
    if (body.mcp !== undefined && body.mcp !== null)
      throw new E2bUnsupportedError('mcp: MCP gateways in the sandbox are not offered here (our MCP server is /mcp)');
    if (Array.isArray(body.volumeMounts) && body.volumeMounts.length > 0) throw new E2bUnsupportedError('volumeMounts: volumes are not offered here');
    const envVars = body.envVars ?? {};
    for (const [name, value] of Object.entries(envVars)) {
      if (!ENV_NAME.test(name)) throw new OrchestratorError('invalid_request', `envVars: ${JSON.stringify(name.slice(0, 64))} is not a variable name`);
      if (value.includes('\0')) throw new OrchestratorError('invalid_request', `envVars.${name} must not contain a NUL character`);
    }
    const session = await manager.create(
      {
        template: settings.templates.get(body.templateID) ?? body.templateID,
        ...(body.timeout ? { timeoutSeconds: body.timeout } : {}),
        metadata: body.metadata ?? {},
        ...(body.allow_internet_access !== undefined ? { network: { egress: body.allow_internet_access } } : {}),
        ...(body.autoPause ? { onIdle: 'pause' as const } : {}),
        ...(body.autoResume?.enabled !== undefined ? { autoResume: body.autoResume.enabled } : {}),
      },
      { tenant: request.tenant },
    );
    const row = { sessionId: session.id, tenant: request.tenant, templateId: body.templateID, envVars };
    store.prune((id) => manager.tenantOf(id) !== undefined);
    const token = store.add(row);
    return reply.status(201).send(sandboxAccess(session, row, token, domain));
  };
  app.post('/sandboxes', { config, schema: { body: newSandbox } }, create);
  app.post('/v2/sandboxes', { config, schema: { body: newSandbox } }, create);

  const listed = (request: FastifyRequest<{ Querystring: { metadata?: string; state?: string; limit?: number; nextToken?: string } }>) => {
    const filter = parseMetadataFilter(request.query.metadata);
    const states = (request.query.state ?? 'running,paused').split(',');
    return manager
      .list(request.tenant)
      .filter((s) => {
        const state = e2bState(s);
        const metadata = e2bMetadata(s.metadata);
        return state !== undefined && states.includes(state) && filter.every(([k, v]) => Object.hasOwn(metadata, k) && metadata[k] === v);
      })
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  };
  const listQuery = {
    type: 'object',
    properties: {
      metadata: { type: 'string', maxLength: 8192 },
      state: { type: 'string', pattern: '^(running|paused)(,(running|paused))?$' },
      limit: { type: 'integer', minimum: 1, maximum: 1000 },
      nextToken: { type: 'string', pattern: '^[0-9]{1,6}$' },
      startedAfter: { type: 'string' },
      template: { type: 'string' },
      order: { type: 'string' },
    },
  } as const;
  app.get<{ Querystring: { metadata?: string; state?: string } }>('/sandboxes', { config, schema: { querystring: listQuery } }, async (request) =>
    listed(request).map((s) => sandboxDetail(s, store.get(s.id), domain)),
  );
  app.get<{ Querystring: { metadata?: string; state?: string; limit?: number; nextToken?: string } }>(
    '/v2/sandboxes',
    { config, schema: { querystring: listQuery } },
    async (request, reply) => {
      const all = listed(request);
      const from = Number(request.query.nextToken ?? 0);
      const limit = request.query.limit ?? 100;
      if (from + limit < all.length) void reply.header('x-next-token', String(from + limit));
      return all.slice(from, from + limit).map((s) => sandboxDetail(s, store.get(s.id), domain));
    },
  );

  app.get<{ Params: { sandboxID: string } }>('/sandboxes/:sandboxID', { config, schema: { params: idParams } }, async (request) => {
    const session = own(request);
    return sandboxDetail(session, store.get(session.id), domain);
  });
  app.get<{ Params: { sandboxID: string } }>('/sandboxes/:sandboxID/metrics', { config, schema: { params: idParams } }, async (request) => {
    own(request);
    return [];
  });

  app.delete<{ Params: { sandboxID: string } }>('/sandboxes/:sandboxID', { config, schema: { params: idParams } }, async (request, reply) => {
    await manager.destroy(own(request).id, 'deleted');
    return reply.status(204).send();
  });

  const setTimeout = async (request: FastifyRequest<{ Params: { sandboxID: string }; Body: { timeout?: number; duration?: number } }>, reply: FastifyReply) => {
    const seconds = request.body?.timeout ?? request.body?.duration;
    const session = own(request);
    if (seconds) manager.updateTimeouts(session.id, { timeoutSeconds: seconds });
    return reply.status(204).send();
  };
  app.post('/sandboxes/:sandboxID/timeout', { config, schema: { params: idParams, body: timeoutBody } }, setTimeout);
  app.post('/sandboxes/:sandboxID/refreshes', { config, schema: { params: idParams } }, setTimeout);

  app.post<{ Params: { sandboxID: string } }>('/sandboxes/:sandboxID/pause', { config, schema: { params: idParams } }, async (request, reply) => {
    const session = own(request);
    if (session.state === 'paused') return reply.status(409).send({ code: 409, message: `sandbox ${session.id} is already paused` });
    await manager.pause(session.id, 'auto').catch((err: unknown) => {
      // Not a 409: the SDK reads that as "already paused" and returns false without a word.
      if (err instanceof OrchestratorError && err.code === 'pause_mode_unavailable') throw new E2bUnsupportedError(`pause: ${err.message}`);
      throw err;
    });
    return reply.status(204).send();
  });

  /** Connect (and E2B's older resume): resumes a paused sandbox, sets its timeout, hands out a token. */
  const connect = async (request: FastifyRequest<{ Params: { sandboxID: string }; Body: { timeout?: number } }>, reply: FastifyReply) => {
    let session = own(request);
    const wasPaused = session.state === 'paused';
    if (wasPaused) session = await manager.resume(session.id);
    if (request.body?.timeout) session = manager.updateTimeouts(session.id, { timeoutSeconds: request.body.timeout });
    let row = store.get(session.id);
    let token = row ? store.issue(session.id) : undefined;
    if (!row || token === undefined) {
      // One of the tenant's sessions made through our own API: it becomes reachable by the SDK too.
      row = { sessionId: session.id, tenant: request.tenant, templateId: session.template, envVars: {} };
      token = store.add(row);
    }
    return reply.status(wasPaused ? 201 : 200).send(sandboxAccess(session, row, token, domain));
  };
  app.post('/sandboxes/:sandboxID/connect', { config, schema: { params: idParams, body: timeoutBody } }, connect);
  app.post('/v2/sandboxes/:sandboxID/connect', { config, schema: { params: idParams, body: timeoutBody } }, connect);
  app.post('/sandboxes/:sandboxID/resume', { config, schema: { params: idParams, body: timeoutBody } }, connect);
}
