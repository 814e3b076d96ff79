import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';

/** A request the SDK sent to the stand-in: its headers and parsed body. */
export interface SeenRequest {
  headers: IncomingHttpHeaders;
  body: {
    model: string;
    max_tokens: number;
    system?: unknown;
    tools: Array<Record<string, unknown>>;
    messages: Array<{ role: string; content: Array<Record<string, unknown>> }>;
  };
}

/** One scripted answer: a Message's content and stop reason, an API error, or a hang (until the client gives up). */
export type Scripted =
  | { content: Array<Record<string, unknown>>; stop_reason: 'end_turn' | 'tool_use' | 'max_tokens' }
  | { status: number; error: { type: string; message: string } }
  | { hang: true };

/**
 * A local stand-in for the Messages API (POST /v1/messages, as @anthropic-ai/sdk speaks it
 * through its baseURL): answers each request with the next scripted response of the run its
 * task names, and keeps every request for the test to check. Zero latency.
 */
export class MessagesStandIn {
  readonly requests: SeenRequest[] = [];
  private readonly scripts = new Map<string, Scripted[]>();
  private server: Server | undefined;
  url = '';

  /** The answers to a run whose first user message is `task`, in order. */
  script(task: string, answers: Scripted[]): void {
    this.scripts.set(task, [...answers]);
  }

  /** The requests of the run whose task is `task`. */
  requestsOf(task: string): SeenRequest[] {
    return this.requests.filter((r) => firstText(r) === task);
  }

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.method !== 'POST' || !req.url?.startsWith('/v1/messages')) {
          res
            .writeHead(404, { 'content-type': 'application/json' })
            .end(JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: req.url } }));
          return;
        }
        const seen: SeenRequest = { headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString()) as SeenRequest['body'] };
        this.requests.push(seen);
        const next = this.scripts.get(firstText(seen))?.shift();
        if (!next) {
          res
            .writeHead(500, { 'content-type': 'application/json' })
            .end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: 'script exhausted' } }));
        } else if ('hang' in next) {
          return; // never answered: the client aborts
        } else if ('status' in next) {
          res.writeHead(next.status, { 'content-type': 'application/json' }).end(JSON.stringify({ type: 'error', error: next.error }));
        } else {
          const message = {
            id: `msg_${this.requests.length}`,
            type: 'message',
            role: 'assistant',
            model: seen.body.model,
            content: next.content,
            stop_reason: next.stop_reason,
            stop_sequence: null,
            usage: { input_tokens: 1000, output_tokens: 50, cache_read_input_tokens: 800, cache_creation_input_tokens: 100 },
          };
          res.writeHead(200, { 'content-type': 'application/json', 'request-id': `req_${this.requests.length}` }).end(JSON.stringify(message));
        }
      });
    });
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}

function firstText(r: SeenRequest): string {
  const first = r.body.messages[0]?.content[0];
  return typeof first?.text === 'string' ? first.text : '';
}

/** Every image block in a request's tool results. */
export function imagesIn(r: SeenRequest): Array<Record<string, unknown>> {
  return r.body.messages.flatMap((m) =>
    m.content.flatMap((b) =>
      b.type === 'tool_result' && Array.isArray(b.content) ? (b.content as Array<Record<string, unknown>>).filter((c) => c.type === 'image') : [],
    ),
  );
}
