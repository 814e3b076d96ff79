/**
 * A small real HTTP server standing in for a cluster node in the gateway's unit tier: the
 * routes of `sbx serve` the gateway forwards, answering what a node would, and recording the
 * headers of every request it receives (the tests assert on them). It refuses any request
 * without the cluster's secret, as a node does.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import websocket from '@fastify/websocket';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import type { NodeReport } from '../../src/cluster/store/cluster-store.js';

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

export interface FakeNode {
  name: string;
  url: string;
  app: FastifyInstance;
  seen: SeenRequest[];
  /** Sessions it holds: id -> tenant. */
  sessions: Map<string, string>;
  /** What POST /v1/sessions answers (default 201). */
  createAnswer: { status: number; code?: string } | undefined;
  /** Volumes it holds: `tenant/name` -> size MiB; and what POST /v1/volumes answers (default 201). */
  volumes: Map<string, number>;
  volumeAnswer: { status: number; code?: string } | undefined;
  /** Bytes of the upload in progress (the streaming test reads it while the client still sends). */
  uploadBytes: number;
  /** Resolves the next SSE event (the test says when). */
  releaseEvent: (() => void) | undefined;
  /** WebSocket messages received on /rfb, and its last close code. */
  wsMessages: string[];
  wsClosed: number | undefined;
  /** The node's side of the last live-view socket (the backpressure test reads its bufferedAmount). */
  lastWs: import('ws').WebSocket | undefined;
  report(overrides?: Partial<NodeReport>): NodeReport;
  close(): Promise<void>;
}

export const TEST_SECRET = 'a-test-cluster-secret-of-at-least-32-chars';

export async function startFakeNode(name: string, opts: { secret?: string } = {}): Promise<FakeNode> {
  const secret = opts.secret ?? TEST_SECRET;
  const app = Fastify({ forceCloseConnections: true });
  const node: FakeNode = {
    name,
    url: '',
    app,
    seen: [],
    sessions: new Map(),
    createAnswer: undefined,
    volumes: new Map(),
    volumeAnswer: undefined,
    uploadBytes: 0,
    releaseEvent: undefined,
    wsMessages: [],
    wsClosed: undefined,
    lastWs: undefined,
    report: (overrides = {}) => ({
      url: node.url,
      runtimes: ['container'],
      templates: ['desktop', 'minimal'],
      warm: {},
      maxSessions: 10,
      memoryMiB: 16384,
      vcpus: 16,
      sessionMemoryMiB: 1024,
      sessionVcpus: 1,
      version: '0.1.0',
      ...overrides,
    }),
    close: async () => {
      await app.close();
    },
  };
  app.addHook('onRequest', async (request, reply) => {
    node.seen.push({ method: request.method, url: request.url, headers: { ...request.headers } });
    if (request.headers['x-sbx-cluster-secret'] !== secret) {
      return reply.status(401).send({ error: { code: 'cluster_credential_required', message: 'only gateways' } });
    }
  });
  app.addContentTypeParser(
    'application/octet-stream',
    (_request: FastifyRequest, payload: NodeJS.ReadableStream, done: (err: Error | null, body?: unknown) => void) => done(null, payload),
  );
  await app.register(websocket);
  const tenant = (request: FastifyRequest) => String(request.headers['x-sbx-tenant'] ?? '');
  const session = (id: string, owner: string) => ({ id, tenant: owner, state: 'ready', node: name, createdAt: new Date(Date.now()).toISOString() });

  app.post('/v1/sessions', async (request, reply) => {
    const answer = node.createAnswer;
    if (answer && answer.status !== 201)
      return reply.status(answer.status).send({ error: { code: answer.code ?? 'host_memory_low', message: `${name} says no` } });
    const id = String(request.headers['x-sbx-session-id']);
    node.sessions.set(id, tenant(request));
    return reply.status(201).send({ ...session(id, tenant(request)), body: request.body });
  });
  const volume = (owner: string, volumeName: string) => ({
    name: volumeName,
    sizeMiB: node.volumes.get(`${owner}/${volumeName}`),
    usedBytes: 0,
    mountedBy: [],
  });
  app.post<{ Body: { name: string; sizeMiB: number } }>('/v1/volumes', async (request, reply) => {
    const answer = node.volumeAnswer;
    if (answer && answer.status !== 201)
      return reply.status(answer.status).send({ error: { code: answer.code ?? 'host_disk_low', message: `${name} says no` } });
    node.volumes.set(`${tenant(request)}/${request.body.name}`, request.body.sizeMiB);
    return reply.status(201).send({ ...volume(tenant(request), request.body.name), node: name });
  });
  app.get('/v1/volumes', async (request) => ({
    volumes: [...node.volumes.keys()]
      .filter((key) => key.startsWith(`${tenant(request)}/`))
      .map((key) => ({ ...volume(tenant(request), key.split('/')[1]!), node: name })),
  }));
  app.get<{ Params: { name: string } }>('/v1/volumes/:name', async (request, reply) =>
    node.volumes.has(`${tenant(request)}/${request.params.name}`)
      ? { ...volume(tenant(request), request.params.name), node: name }
      : reply.status(404).send({ error: { code: 'volume_not_found', message: `no volume "${request.params.name}"` } }),
  );
  app.delete<{ Params: { name: string } }>('/v1/volumes/:name', async (request) => {
    node.volumes.delete(`${tenant(request)}/${request.params.name}`);
    return { ...volume(tenant(request), request.params.name), node: name };
  });
  app.get('/v1/sessions', async (request) => ({
    sessions: [...node.sessions].filter(([, owner]) => owner === tenant(request)).map(([id, owner]) => session(id, owner)),
  }));
  app.get<{ Params: { id: string } }>('/v1/sessions/:id', async (request, reply) => {
    const owner = node.sessions.get(request.params.id);
    if (owner === undefined || owner !== tenant(request))
      return reply.status(404).send({ error: { code: 'not_found', message: `session ${request.params.id} does not exist` } });
    return { ...session(request.params.id, owner), host: request.headers.host };
  });
  app.delete<{ Params: { id: string } }>('/v1/sessions/:id', async (request) => {
    node.sessions.delete(request.params.id);
    return session(request.params.id, tenant(request));
  });
  app.post<{ Params: { id: string } }>('/v1/sessions/:id/actions', async (request) => ({ ok: true, node: name, body: request.body }));
  app.post<{ Params: { id: string }; Body: { command?: string } }>('/v1/sessions/:id/tools/bash', async (request) => ({
    content: [{ type: 'text', text: `${name} ran ${request.body.command ?? ''} for ${tenant(request)}` }],
    is_error: false,
  }));
  // Never answers: a node partitioned after it accepted the request.
  app.get('/v1/sessions/:id/desktop/windows', () => new Promise(() => undefined));
  app.get('/v1/sessions/:id/trajectory/view', async (request) => ({ page: 'trajectory', node: name, token: (request.query as { token?: string }).token }));
  app.put<{ Params: { id: string } }>('/v1/sessions/:id/files', async (request, reply) => {
    node.uploadBytes = 0;
    for await (const chunk of request.raw) node.uploadBytes += (chunk as Buffer).length;
    return reply.status(201).send({ path: '/tmp/x', size: node.uploadBytes });
  });
  const recording = randomBytes(1000);
  app.get('/v1/sessions/:id/recording', async (request, reply) => {
    const range = /^bytes=(\d+)-(\d+)$/.exec(String(request.headers.range ?? ''));
    if (!range) return reply.type('video/mp4').header('accept-ranges', 'bytes').send(recording);
    const [start, end] = [Number(range[1]), Number(range[2])];
    return reply
      .status(206)
      .type('video/mp4')
      .header('content-range', `bytes ${start}-${end}/${recording.length}`)
      .send(recording.subarray(start, end + 1));
  });
  app.get('/v1/sessions/:id/screen/stream', async (_request, reply) => {
    reply.hijack();
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
    reply.raw.flushHeaders();
    for (let i = 1; i <= 3; i++) {
      await new Promise<void>((resolve) => (node.releaseEvent = resolve));
      reply.raw.write(`event: frame\ndata: {"n":${i}}\n\n`);
    }
    reply.raw.end();
  });
  app.post<{ Params: { id: string } }>('/v1/sessions/:id/views', async (request, reply) => {
    const token = randomBytes(24).toString('base64url');
    return reply.status(201).send({
      viewId: 'v1',
      sessionId: request.params.id,
      url: `http://${request.headers.host}/v1/views/${token}`,
      expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
    });
  });
  app.get<{ Params: { token: string } }>('/v1/views/:token', async (_request, reply) =>
    reply.status(404).type('text/html').send(`<h1>This live view cannot be opened</h1><p>${name}</p>`),
  );
  app.get('/v1/views/:token/rfb', { websocket: true }, (socket) => {
    node.lastWs = socket;
    socket.on('message', (data: Buffer) => {
      node.wsMessages.push(data.toString());
      const flood = /^flood:(\d+)$/.exec(data.toString());
      if (flood) for (let i = 0; i < Number(flood[1]); i++) socket.send(Buffer.alloc(64 * 1024, i % 256));
      else if (data.toString() === 'close-4001') socket.close(4001, 'revoked');
      else socket.send(`echo:${data.toString()}`);
    });
    socket.on('close', (code: number) => (node.wsClosed = code));
  });
  app.post('/v1/runs', async (request, reply) => {
    const body = request.body as { sessionId?: string };
    const sessionId = body.sessionId ?? String(request.headers['x-sbx-session-id']);
    if (body.sessionId === undefined) node.sessions.set(sessionId, tenant(request));
    return reply.status(201).send({ id: `run_${randomBytes(12).toString('hex')}`, sessionId, node: name });
  });
  app.get<{ Params: { id: string } }>('/v1/runs/:id', async (request) => ({ id: request.params.id, node: name }));
  app.get('/v1/templates', async () => ({
    templates: [
      { name: 'desktop', kind: 'built-in', built: name === 'n2' },
      { name: `only-${name}`, kind: 'user', built: true },
    ],
  }));
  app.get('/openapi.json', async () => ({ openapi: '3.0.3', node: name }));
  node.url = await app.listen({ host: '127.0.0.1', port: 0 });
  return node;
}
