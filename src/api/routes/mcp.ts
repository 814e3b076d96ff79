import type { OutgoingHttpHeaders } from 'node:http';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SandboxClient } from '../../client/index.js';
import type { ErrorCode } from '../../errors.js';
import { sendError } from '../errors.js';
import { createMcpServer } from '../../mcp/server.js';

/** One request handed to the app's own routes in process (fastify's inject). */
export interface InjectedRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  payload?: string | Buffer;
}
export interface InjectedResponse {
  statusCode: number;
  headers: OutgoingHttpHeaders;
  rawPayload: Buffer;
}
export type Dispatch = (request: InjectedRequest) => Promise<InjectedResponse>;

/**
 * /mcp: the MCP server (mcp/server.ts) over the streamable HTTP transport of the official
 * SDK, stateless and answering in JSON: each POST is one JSON-RPC exchange with a server made
 * for it, so nothing is kept between requests and no stream stays open per client.
 *
 * Authentication and the tenant come from the root instance's hooks, as for every route
 * (auth/request-identity.ts): /mcp is not an open route. Each tool then calls our own routes
 * in process (`dispatch`) with the caller's Authorization header, so a tool call is the same
 * request as the API's, with its checks, tenant scope, limits and trajectory: an MCP client
 * can do exactly what its key can do over HTTP, nothing more.
 */
export async function mcpRoutes(app: FastifyInstance, opts: { dispatch: Dispatch }): Promise<void> {
  app.post(
    '/mcp',
    {
      schema: {
        summary: 'The MCP server (streamable HTTP transport, stateless, JSON answers): sandboxes as MCP tools. See docs/mcp.md',
        tags: ['mcp'],
      },
    },
    async (request, reply) => {
      const client = new SandboxClient({ baseUrl: 'http://orchestrator.internal', fetch: injectFetch(opts.dispatch, request.headers.authorization) });
      const server = createMcpServer(client);
      const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      try {
        await server.connect(transport);
        const response = await transport.handleRequest(webRequest(request), { parsedBody: request.body });
        return await sendWebResponse(reply, response);
      } finally {
        await server.close();
      }
    },
  );
  // A stateless server has no stream to offer (GET) and no session to end (DELETE): the
  // transport's spec lets it say 405, which the SDK's client takes as "none".
  const notAllowed = async (request: FastifyRequest, reply: FastifyReply) =>
    sendError(reply.header('allow', 'POST'), 'method_not_allowed', `${request.method} /mcp: this MCP endpoint is stateless, only POST is served`);
  app.get('/mcp', { schema: { hide: true } }, notAllowed);
  app.delete('/mcp', { schema: { hide: true } }, notAllowed);
}

/** The fastify request as the web Request the SDK's transport reads (its body comes parsed). */
function webRequest(request: FastifyRequest): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    if (typeof value === 'string') headers.set(name, value);
    else if (Array.isArray(value)) for (const v of value) headers.append(name, v);
  }
  return new Request(`http://${request.hostname || 'localhost'}${request.url}`, { method: request.method, headers });
}

/** Our error codes for the transport's own refusals, by status (the others are invalid_mcp_request). */
const TRANSPORT_ERROR_CODES: Readonly<Record<number, ErrorCode>> = {
  400: 'invalid_mcp_request',
  404: 'not_found',
  405: 'method_not_allowed',
  406: 'not_acceptable',
  413: 'body_too_large',
  415: 'unsupported_media_type',
};

/**
 * The transport's answer as ours. A refusal of the HTTP request itself (not JSON-RPC, no
 * Accept of both JSON and SSE...) comes from the SDK as a JSON-RPC error with a numeric code;
 * it is said in this API's one error shape instead (the SDK's client reads only the status
 * and the text of a refused POST). JSON-RPC errors of a well-formed request (an unknown
 * method, say) stay in the 200 answer, as MCP has them.
 */
async function sendWebResponse(reply: FastifyReply, response: Response): Promise<FastifyReply> {
  if (response.status >= 400) {
    const text = await response.text();
    let message = `the MCP request was refused (HTTP ${response.status})`;
    try {
      const said = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
      if (typeof said === 'string' && said.length > 0) message = said.slice(0, 500);
    } catch {
      // not JSON: keep the generic message
    }
    const code = response.status >= 500 ? 'internal' : (TRANSPORT_ERROR_CODES[response.status] ?? 'invalid_mcp_request');
    return sendError(reply, code, message);
  }
  reply.status(response.status);
  response.headers.forEach((value, name) => {
    void reply.header(name, value);
  });
  const body = Buffer.from(await response.arrayBuffer());
  return reply.send(body.length > 0 ? body : undefined);
}

/**
 * A fetch for our client that hands each request to the app's routes in process, with the
 * caller's Authorization header and nothing else of its: no socket, no port, no second
 * authentication scheme.
 */
export function injectFetch(dispatch: Dispatch, authorization: string | undefined): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const headers: Record<string, string> = {};
    new Headers(init?.headers).forEach((value, name) => {
      headers[name] = value;
    });
    if (authorization !== undefined) headers.authorization = authorization;
    else delete headers.authorization;
    const body = init?.body;
    let payload: string | Buffer | undefined;
    if (typeof body === 'string') payload = body;
    else if (body instanceof Uint8Array) payload = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    else if (body !== undefined && body !== null) throw new TypeError('in-process requests take a string or bytes as their body');
    const answer = await dispatch({ method: init?.method ?? 'GET', url: url.pathname + url.search, headers, ...(payload === undefined ? {} : { payload }) });
    const responseHeaders = new Headers();
    for (const [name, value] of Object.entries(answer.headers)) {
      if (value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) responseHeaders.append(name, String(v));
    }
    const empty = answer.statusCode === 204 || answer.statusCode === 304 || answer.rawPayload.length === 0;
    return new Response(empty ? null : new Uint8Array(answer.rawPayload), { status: answer.statusCode, headers: responseHeaders });
  };
}
