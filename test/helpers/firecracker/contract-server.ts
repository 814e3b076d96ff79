import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { FirecrackerSpecValidator } from './spec-validator.js';
import { FirecrackerVmModel } from './vm-model.js';

/** One request as the server saw it, accepted or not. */
export interface RecordedRequest {
  /** "PUT /drives/rootfs" */
  call: string;
  method: string;
  path: string;
  /** The parsed JSON body, or the raw text if it was not JSON; undefined without a body. */
  body: unknown;
  status: number;
  fault?: string;
}

let validator: FirecrackerSpecValidator | undefined;

export interface ContractServerOptions {
  /** Listen here (a stand-in Firecracker process's --api-sock) instead of a fresh temporary path. */
  socketPath?: string;
  /**
   * What a real Firecracker checks on the host when it applies a call: that the kernel and
   * the drives' files open, that the TAP exists. A fault message refuses the call.
   * `call` is the spec's form: "PUT /drives/{drive_id}".
   */
  hostCheck?: (call: string, body: unknown) => string | undefined;
  /** After every answer (the emulator records them to a file). */
  onRequest?: (record: RecordedRequest) => void;
  /**
   * After an accepted call has changed the VM model (the emulator boots a guest on
   * InstanceStart); a promise is awaited before the answer (a snapshot written, a guest
   * loaded), and its rejection is the call's fault.
   */
  afterAccepted?: (call: string, body: unknown) => void | Promise<void>;
}

/**
 * A stand-in for one fresh Firecracker process, listening on a Unix socket, that holds every
 * request to the official spec: method and path must be an operation of the spec, the body
 * must match its schema (spec-validator.ts), and the call must be allowed in the VM's
 * current state (vm-model.ts). It answers as Firecracker does: 204 for a successful PUT or
 * PATCH, 200 with JSON for a GET, 400 with `{"fault_message": ...}` otherwise; and its own
 * answers are checked against the spec's response schemas too, so the fake cannot drift.
 * Every request is recorded, so tests can assert the exact sequence a runtime sent.
 */
export class FirecrackerContractServer {
  readonly requests: RecordedRequest[] = [];
  readonly model: FirecrackerVmModel;
  /** Connections opened to the server: a client that keeps its connection alive opens one. */
  connections = 0;

  private constructor(
    readonly socketPath: string,
    private readonly dir: string,
    private readonly server: http.Server,
    private readonly spec: FirecrackerSpecValidator,
    private readonly options: ContractServerOptions,
  ) {
    this.model = new FirecrackerVmModel(spec.version);
  }

  static async start(options: ContractServerOptions = {}): Promise<FirecrackerContractServer> {
    validator ??= new FirecrackerSpecValidator();
    const dir = options.socketPath ? '' : await mkdtemp(path.join(os.tmpdir(), 'fc-contract-'));
    const socketPath = options.socketPath ?? path.join(dir, 'firecracker.socket');
    const server = http.createServer();
    const contract = new FirecrackerContractServer(socketPath, dir, server, validator, options);
    server.on('connection', () => contract.connections++);
    server.on('request', (req, res) => contract.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, resolve);
    });
    return contract;
  }

  /** The calls that were accepted, in order: "PUT /machine-config", ... */
  acceptedCalls(): string[] {
    return this.requests.filter((r) => r.status < 300).map((r) => r.call);
  }

  rejected(): RecordedRequest[] {
    return this.requests.filter((r) => r.status >= 300);
  }

  /** The body of the last accepted request for this call. */
  bodyOf(call: string): unknown {
    return this.requests.filter((r) => r.call === call && r.status < 300).at(-1)?.body;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
    else await rm(this.socketPath, { force: true });
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const method = req.method ?? '';
      const url = new URL(req.url ?? '/', 'http://localhost');
      const text = Buffer.concat(chunks).toString('utf8');
      const record: RecordedRequest = { call: `${method} ${url.pathname}`, method, path: url.pathname, body: parseOrRaw(text), status: 0 };
      this.requests.push(record);

      const reply = (status: number, body?: unknown) => {
        record.status = status;
        this.options.onRequest?.(record);
        if (body === undefined) {
          res.writeHead(status).end();
          return;
        }
        const payload = JSON.stringify(body);
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }).end(payload);
      };
      const refuse = (message: string) => {
        record.fault = message;
        reply(400, { fault_message: message });
      };

      if (text && req.headers['content-type'] !== 'application/json') return refuse('The request body must be application/json.');
      const check = this.spec.checkRequest(method, url.pathname, text);
      if (!check.ok) return refuse(check.fault);
      const call = `${check.operation.method} ${check.operation.template}`;
      const hostFault = this.options.hostCheck?.(call, check.body);
      if (hostFault) return refuse(hostFault);
      const outcome = this.model.apply(check.operation, check.body);
      if (outcome.status === 400) return refuse(outcome.fault);
      const answer = () => {
        const body = outcome.status === 200 ? outcome.body : undefined;
        const drift = this.spec.checkResponse(check.operation, outcome.status, body);
        if (drift) {
          // A bug in this fake, not in the client: fail loudly rather than teach a wrong contract.
          record.fault = `contract server answer breaks the spec: ${drift}`;
          reply(500, { fault_message: record.fault });
          return;
        }
        reply(outcome.status, body);
      };
      // What the process does once a call is accepted (a snapshot written, a guest loaded) is
      // done before it answers, as Firecracker's API answers once the work is done.
      const done = outcome.status === 204 ? this.options.afterAccepted?.(call, check.body) : undefined;
      if (!done) return answer();
      done.then(answer, (err: unknown) => refuse((err as Error).message));
    });
  }
}

function parseOrRaw(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
