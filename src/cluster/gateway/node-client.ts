/**
 * Small buffered requests from the gateway to a node: creates (which may be retried on
 * another node, so their answer must be read before anything is sent to the client), the
 * fan-out of a session list, the API description. Everything that streams goes through
 * @fastify/reply-from instead (forward.ts).
 */
import http from 'node:http';
import { NodeFailedError, NodeUnreachableError } from './errors.js';

export interface NodeAnswer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface NodeRequest {
  readonly method: string;
  /** The node's advertised URL joined with the path and query. */
  readonly url: string;
  readonly headers: Record<string, string | string[]>;
  readonly body?: Buffer;
  readonly node: string;
  /** Instead of the client's answer timeout (a list a node answers at once need not wait minutes). */
  readonly timeoutMs?: number;
}

export interface NodeClientOptions {
  readonly connectTimeoutMs: number;
  readonly answerTimeoutMs: number;
  /** Larger answers are refused (a node's list of sessions, a create's session: kilobytes). */
  readonly maxAnswerBytes?: number;
}

const DEFAULT_MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** Codes of a connection that never carried the request: safe to retry, the node is unreachable. */
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT', 'ECONNECT_TIMEOUT']);

/** A failure to reach a node as the client sees it: 503 node_unreachable or 502 node_failed. */
export function nodeError(node: string, err: unknown): NodeUnreachableError | NodeFailedError {
  const cause = (err as { cause?: unknown } | undefined)?.cause ?? err;
  const rawCode = (cause as { code?: unknown } | undefined)?.code ?? (err as { code?: unknown } | undefined)?.code;
  const code = typeof rawCode === 'string' ? rawCode : '';
  const message = cause instanceof Error ? cause.message : String(cause);
  if (NOT_CONNECTED.has(code))
    return new NodeUnreachableError(node, code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ECONNECT_TIMEOUT' ? 'connect timed out' : code);
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'EANSWER_TIMEOUT' || code === 'FST_REPLY_FROM_GATEWAY_TIMEOUT')
    return new NodeFailedError(node, 'no answer in time');
  return new NodeFailedError(node, code || message.slice(0, 100));
}

export class NodeClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

  constructor(private readonly opts: NodeClientOptions) {}

  request(req: NodeRequest): Promise<NodeAnswer> {
    const limit = this.opts.maxAnswerBytes ?? DEFAULT_MAX_ANSWER_BYTES;
    return new Promise<NodeAnswer>((resolve, reject) => {
      let settled = false;
      const fail = (err: Error & { code?: string }) => {
        if (settled) return;
        settled = true;
        clearTimeout(connectTimer);
        clearTimeout(answerTimer);
        outgoing.destroy();
        reject(nodeError(req.node, err));
      };
      const outgoing = http.request(req.url, { method: req.method, headers: req.headers, agent: this.agent });
      const timeout = (code: string, message: string) => () => fail(Object.assign(new Error(message), { code }));
      const connectTimer = setTimeout(timeout('ECONNECT_TIMEOUT', 'connect timed out'), this.opts.connectTimeoutMs);
      const answerTimer = setTimeout(timeout('EANSWER_TIMEOUT', 'no answer in time'), req.timeoutMs ?? this.opts.answerTimeoutMs);
      outgoing.on('socket', (socket) => {
        if (!socket.connecting)
          clearTimeout(connectTimer); // a kept-alive socket
        else socket.once('connect', () => clearTimeout(connectTimer));
      });
      outgoing.on('error', fail);
      outgoing.on('response', (incoming) => {
        const chunks: Buffer[] = [];
        let size = 0;
        incoming.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > limit) fail(Object.assign(new Error(`answer over ${limit} bytes`), { code: 'EANSWER_TOO_LARGE' }));
          else chunks.push(chunk);
        });
        incoming.on('error', fail);
        incoming.on('end', () => {
          if (settled) return;
          settled = true;
          clearTimeout(connectTimer);
          clearTimeout(answerTimer);
          resolve({ status: incoming.statusCode ?? 502, headers: incoming.headers, body: Buffer.concat(chunks) });
        });
      });
      outgoing.end(req.body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** The path and query of a request, joined to a node's advertised URL. */
export function nodeUrl(base: string, pathAndQuery: string): string {
  return base.replace(/\/+$/, '') + pathAndQuery;
}
