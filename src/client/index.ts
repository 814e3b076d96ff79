import { errorFor, SandboxError } from './errors.js';

export * from './errors.js';

/** A session as the API describes it. */
export interface SessionInfo {
  id: string;
  state: 'creating' | 'ready' | 'destroying' | 'destroyed' | 'failed';
  runtime: 'container' | 'qemu' | 'firecracker';
  display: { width: number; height: number };
  timeoutSeconds?: number;
  metadata?: Record<string, unknown>;
  createdAt: string;
  expiresAt: string;
  error?: string;
}

export interface CreateOptions {
  width?: number;
  height?: number;
  timeoutSeconds?: number;
  metadata?: Record<string, unknown>;
}

/** A computer-use tool input, as a model sends it. */
export interface ComputerToolInput {
  action: string;
  coordinate?: [number, number];
  text?: string;
  key?: string;
  [field: string]: unknown;
}

export interface ActionResult {
  action: string;
  output?: string;
  cursor?: { x: number; y: number };
  image?: { mediaType: string; data: string };
  durationMs: number;
}

export interface ClientOptions {
  /** e.g. http://127.0.0.1:8080 (default: SBX_URL or that) */
  baseUrl?: string;
  apiKey?: string;
}

/** A small typed client of the orchestrator's HTTP API. */
export class SandboxClient {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? process.env.SBX_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
    this.apiKey = options.apiKey ?? process.env.SBX_API_KEY;
  }

  async create(options: CreateOptions = {}): Promise<Sandbox> {
    const info = await this.json<SessionInfo>('POST', '/v1/sessions', options);
    return new Sandbox(this, info);
  }

  async list(): Promise<SessionInfo[]> {
    return (await this.json<{ sessions: SessionInfo[] }>('GET', '/v1/sessions')).sessions;
  }

  async get(id: string): Promise<SessionInfo> {
    return this.json<SessionInfo>('GET', `/v1/sessions/${encodeURIComponent(id)}`);
  }

  /** A handle on an existing session. */
  async connect(id: string): Promise<Sandbox> {
    return new Sandbox(this, await this.get(id));
  }

  async destroy(id: string): Promise<SessionInfo> {
    return this.json<SessionInfo>('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }

  async screenshot(id: string): Promise<Buffer> {
    const response = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/screenshot`);
    return Buffer.from(await response.arrayBuffer());
  }

  async action(id: string, input: ComputerToolInput): Promise<ActionResult> {
    return this.json<ActionResult>('POST', `/v1/sessions/${encodeURIComponent(id)}/actions`, input);
  }

  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.request(method, path, body);
    return (await response.json()) as T;
  }

  private async request(method: string, path: string, body?: unknown): Promise<Response> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    const response = await fetch(this.baseUrl + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!response.ok) {
      let code = 'http_error';
      let message = `${method} ${path}: HTTP ${response.status}`;
      try {
        const parsed = (await response.json()) as { error?: { code?: string; message?: string } };
        code = parsed.error?.code ?? code;
        message = parsed.error?.message ?? message;
      } catch {
        // not JSON: keep the generic message
      }
      throw errorFor(response.status, code, message);
    }
    return response;
  }
}

/** One sandbox: a method per action. */
export class Sandbox {
  constructor(
    private readonly client: SandboxClient,
    public info: SessionInfo,
  ) {}

  get id(): string {
    return this.info.id;
  }

  screenshot(): Promise<Buffer> {
    return this.client.screenshot(this.id);
  }

  action(input: ComputerToolInput): Promise<ActionResult> {
    return this.client.action(this.id, input);
  }

  leftClick(x?: number, y?: number): Promise<ActionResult> {
    return this.action(x === undefined || y === undefined ? { action: 'left_click' } : { action: 'left_click', coordinate: [x, y] });
  }

  rightClick(x: number, y: number): Promise<ActionResult> {
    return this.action({ action: 'right_click', coordinate: [x, y] });
  }

  doubleClick(x: number, y: number): Promise<ActionResult> {
    return this.action({ action: 'double_click', coordinate: [x, y] });
  }

  mouseMove(x: number, y: number): Promise<ActionResult> {
    return this.action({ action: 'mouse_move', coordinate: [x, y] });
  }

  type(text: string): Promise<ActionResult> {
    return this.action({ action: 'type', text });
  }

  key(combo: string): Promise<ActionResult> {
    return this.action({ action: 'key', text: combo });
  }

  async cursorPosition(): Promise<{ x: number; y: number }> {
    const result = await this.action({ action: 'cursor_position' });
    if (!result.cursor) throw new SandboxError('cursor_position returned no cursor', 502, 'bad_response');
    return result.cursor;
  }

  async refresh(): Promise<SessionInfo> {
    this.info = await this.client.get(this.id);
    return this.info;
  }

  async destroy(): Promise<void> {
    this.info = await this.client.destroy(this.id);
  }
}
