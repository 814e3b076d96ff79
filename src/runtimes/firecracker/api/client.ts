import http from 'node:http';
import { assertUnixSocketPath } from '../unix-socket-path.js';
import { FirecrackerApiError, FirecrackerTransportError } from './errors.js';
import type {
  ActionType,
  BootSource,
  Drive,
  FaultBody,
  FirecrackerVersion,
  InstanceInfo,
  Logger,
  MachineConfiguration,
  Metrics,
  NetworkInterface,
  SnapshotCreateParams,
  SnapshotLoadParams,
  Vm,
  Vsock,
} from './types.js';

/** The time limit of one call unless the caller gives another. Configuration calls take milliseconds. */
export const DEFAULT_CALL_TIMEOUT_MS = 10_000;
/** Creating or loading a snapshot reads or writes all of guest memory, which takes a while. */
export const SNAPSHOT_CALL_TIMEOUT_MS = 120_000;

export interface CallOptions {
  timeoutMs?: number;
}

type Method = 'GET' | 'PUT' | 'PATCH';

/**
 * A client of one Firecracker process's API, over its Unix socket: one typed method per call
 * the runtime makes, bodies typed from the spec (types.ts). A failed call throws a
 * FirecrackerApiError (Firecracker answered with an error) or a FirecrackerTransportError
 * (no answer), both naming the call.
 *
 * Each VM gets its own client, and each client one keep-alive connection: Firecracker's API
 * thread serves requests one at a time, so a second connection would only queue behind the
 * first. Call `close()` when the VM is gone.
 */
export class FirecrackerClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

  constructor(
    readonly socketPath: string,
    private readonly defaultTimeoutMs: number = DEFAULT_CALL_TIMEOUT_MS,
  ) {
    assertUnixSocketPath(socketPath, 'the Firecracker API socket');
  }

  getInstanceInfo(options?: CallOptions): Promise<InstanceInfo> {
    return this.call<InstanceInfo>('GET', '/', undefined, options);
  }

  getVersion(options?: CallOptions): Promise<FirecrackerVersion> {
    return this.call<FirecrackerVersion>('GET', '/version', undefined, options);
  }

  putLogger(logger: Logger): Promise<void> {
    return this.call('PUT', '/logger', logger);
  }

  putMetrics(metrics: Metrics): Promise<void> {
    return this.call('PUT', '/metrics', metrics);
  }

  getMachineConfig(options?: CallOptions): Promise<MachineConfiguration> {
    return this.call<MachineConfiguration>('GET', '/machine-config', undefined, options);
  }

  putMachineConfig(config: MachineConfiguration): Promise<void> {
    return this.call('PUT', '/machine-config', config);
  }

  putBootSource(source: BootSource): Promise<void> {
    return this.call('PUT', '/boot-source', source);
  }

  /** The id goes in both the path and the body; taking it once means they cannot disagree. */
  async putDrive(driveId: string, drive: Omit<Drive, 'drive_id'>): Promise<void> {
    assertDeviceId(driveId);
    return this.call('PUT', `/drives/${driveId}`, { drive_id: driveId, ...drive } satisfies Drive);
  }

  async putNetworkInterface(ifaceId: string, iface: Omit<NetworkInterface, 'iface_id'>): Promise<void> {
    assertDeviceId(ifaceId);
    return this.call('PUT', `/network-interfaces/${ifaceId}`, { iface_id: ifaceId, ...iface } satisfies NetworkInterface);
  }

  putVsock(vsock: Vsock): Promise<void> {
    return this.call('PUT', '/vsock', vsock);
  }

  putAction(actionType: ActionType, options?: CallOptions): Promise<void> {
    return this.call('PUT', '/actions', { action_type: actionType }, options);
  }

  patchVm(vm: Vm): Promise<void> {
    return this.call('PATCH', '/vm', vm);
  }

  putSnapshotCreate(params: SnapshotCreateParams, options: CallOptions = { timeoutMs: SNAPSHOT_CALL_TIMEOUT_MS }): Promise<void> {
    return this.call('PUT', '/snapshot/create', params, options);
  }

  putSnapshotLoad(params: SnapshotLoadParams, options: CallOptions = { timeoutMs: SNAPSHOT_CALL_TIMEOUT_MS }): Promise<void> {
    return this.call('PUT', '/snapshot/load', params, options);
  }

  /** Drops the kept-alive connection. The client must not be used afterwards. */
  close(): void {
    this.agent.destroy();
  }

  private call<T = void>(method: Method, path: string, body?: object, options: CallOptions = {}): Promise<T> {
    const call = `${method} ${path}`;
    const timeoutMs = options.timeoutMs ?? this.defaultTimeoutMs;
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const signal = AbortSignal.timeout(timeoutMs);
    return new Promise<T>((resolve, reject) => {
      const transportFailure = (err: Error) =>
        reject(
          signal.aborted
            ? new FirecrackerTransportError(call, `no answer within ${timeoutMs} ms`, { cause: err })
            : new FirecrackerTransportError(call, err.message, { cause: err }),
        );
      const req = http.request(
        {
          agent: this.agent,
          socketPath: this.socketPath,
          method,
          path,
          headers: {
            accept: 'application/json',
            ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}),
          },
          signal,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('error', transportFailure);
          res.on('end', () => {
            const status = res.statusCode ?? 0;
            const text = Buffer.concat(chunks).toString('utf8');
            if (status < 200 || status >= 300) {
              reject(new FirecrackerApiError(call, status, faultMessageOf(text)));
              return;
            }
            if (!text) {
              resolve(undefined as T);
              return;
            }
            try {
              // Trusted as the spec's response type: it is Firecracker's own answer, and the
              // contract tests hold the test server's answers to the same schemas.
              resolve(JSON.parse(text) as T);
            } catch (err) {
              reject(new FirecrackerTransportError(call, `answer is not JSON: ${text.slice(0, 200)}`, { cause: err }));
            }
          });
        },
      );
      req.on('error', transportFailure);
      req.end(payload);
    });
  }
}

/**
 * Device ids are the only variable part of a path. Ours are constants ("rootfs", "eth0");
 * this keeps any other id from changing the path's meaning ("/", "?", "%", spaces).
 */
function assertDeviceId(id: string): void {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) throw new Error(`invalid Firecracker device id "${id}": use 1-64 letters, digits, "_" or "-"`);
}

function faultMessageOf(text: string): string {
  try {
    const body = JSON.parse(text) as FaultBody | null;
    if (body && typeof body.fault_message === 'string') return body.fault_message;
  } catch {
    // Not JSON: fall through and report the raw text.
  }
  return text.trim().slice(0, 2000);
}
