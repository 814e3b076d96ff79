/**
 * A one-node cluster for the gateway figures (issue 22), as an operator runs one: a
 * PostgreSQL of the bench's own, `sbx node` and `sbx gateway` as processes of the built CLI
 * (each its own event loop, as in a deployment: in one process the gateway's and the node's
 * work would wait on each other and distort the latencies), both on loopback, and an API key
 * of tenant `bench` made with `sbx keys create --db`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { startThrowawayPostgres, type ThrowawayPostgres } from '../cluster/store/throwaway-postgres.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';

/** The built CLI next to this file's folder (the bench runs from dist/). */
const CLI = fileURLToPath(new URL('../cli/main.js', import.meta.url));
export const BENCH_TENANT = 'bench';

export interface BenchClusterOptions {
  /** Resource prefix and subnet of the node's sandboxes: apart from the bench's own orchestrator and from any test's. */
  readonly resourcePrefix: string;
  readonly subnet: string;
  /** The built guest images (SBX_IMAGES_DIR): the node's state dir is a fresh one, without them. */
  readonly imagesDir: string;
  /** The environment the processes start from (the bench's own, read by its entry point: PATH, SBX_RUNTIME, SBX_TEMPLATE...). */
  readonly env: NodeJS.ProcessEnv;
  /** Node options of the gateway's process alone (BENCH_GATEWAY_NODE_OPTIONS: e.g. --cpu-prof to profile it under the bench's load). */
  readonly gatewayNodeOptions?: string[];
}

export interface BenchCluster {
  readonly nodeUrl: string;
  readonly gatewayUrl: string;
  /** The cluster's credential: what a gateway sends a node (x-sbx-cluster-secret). */
  readonly secret: string;
  /** An API key of BENCH_TENANT, valid through the gateway. */
  readonly apiKey: string;
  readonly nodePid: number;
  readonly gatewayPid: number;
  stop(): Promise<void>;
}

/** A port nobody listens on now, on loopback. */
export async function freePort(): Promise<number> {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  server.close();
  return port;
}

/** A CLI process whose output is kept for the error message should it fail. */
class Cli {
  output = '';
  stdout = '';
  readonly child: ChildProcess;

  constructor(args: string[], env: NodeJS.ProcessEnv, nodeOptions: string[] = []) {
    this.child = spawn(process.execPath, [...nodeOptions, CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (d: Buffer) => void (this.output = (this.output + d.toString()).slice(-8000));
    this.child.stdout?.on('data', (d: Buffer) => {
      this.stdout += d.toString();
      keep(d);
    });
    this.child.stderr?.on('data', keep);
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  async waitHealthy(url: string, timeoutMs = 120_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!this.running) throw new Error(`sbx ${this.describe()} exited:\n${this.output}`);
      try {
        if ((await fetch(`${url}/healthz`)).ok) return;
      } catch {
        // not listening yet
      }
      await sleep(100);
    }
    throw new Error(`sbx ${this.describe()} did not answer /healthz within ${timeoutMs} ms:\n${this.output}`);
  }

  async finished(): Promise<number | null> {
    if (!this.running) return this.child.exitCode;
    const [code] = (await once(this.child, 'close')) as [number | null];
    return code;
  }

  async stop(signal: NodeJS.Signals): Promise<void> {
    if (!this.running) return;
    const closed = once(this.child, 'close');
    this.child.kill(signal);
    await closed;
  }

  private describe(): string {
    return String(this.child.spawnargs.find((arg) => !arg.startsWith('-') && arg !== process.execPath && arg !== CLI));
  }
}

export async function startBenchCluster(opts: BenchClusterOptions): Promise<BenchCluster> {
  const secret = randomBytes(36).toString('base64url');
  let pg: ThrowawayPostgres | undefined;
  let node: Cli | undefined;
  let gateway: Cli | undefined;
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-node-'));
  const stop = async (): Promise<void> => {
    await gateway?.stop('SIGTERM');
    // SIGTERM: the node destroys its sessions, as on any shutdown.
    await node?.stop('SIGTERM');
    await removeTreeOnOneMount(stateDir).catch(() => undefined);
    await pg?.stop();
  };
  try {
    pg = await startThrowawayPostgres();
    const env: NodeJS.ProcessEnv = {
      ...opts.env,
      SBX_CLUSTER_SECRET: secret,
      SBX_CLUSTER_DB_URL: pg.url,
      SBX_LOG_LEVEL: 'warn',
      // The bench sends requests as fast as they are answered: the limiter is not what it measures.
      SBX_TENANT_REQUESTS_PER_SECOND: '10000',
      SBX_TENANT_REQUEST_BURST: '10000',
    };
    const nodePort = await freePort();
    const nodeUrl = `http://127.0.0.1:${nodePort}`;
    node = new Cli(
      ['node', '--name', 'bench-node', '--advertise', nodeUrl, '--host', '127.0.0.1', '--port', String(nodePort), '--state-dir', stateDir, '--warm-pool', '0'],
      { ...env, SBX_RESOURCE_PREFIX: opts.resourcePrefix, SBX_SUBNET: opts.subnet, SBX_IMAGES_DIR: opts.imagesDir },
    );
    await node.waitHealthy(nodeUrl);
    const gatewayPort = await freePort();
    const gatewayUrl = `http://127.0.0.1:${gatewayPort}`;
    gateway = new Cli(['gateway', '--host', '127.0.0.1', '--port', String(gatewayPort)], env, opts.gatewayNodeOptions);
    await gateway.waitHealthy(gatewayUrl);
    const keys = new Cli(['keys', 'create', '--tenant', BENCH_TENANT, '--db', pg.url], env);
    if ((await keys.finished()) !== 0) throw new Error(`sbx keys create failed:\n${keys.output}`);
    const apiKey = keys.stdout.trim();
    // The node must be in the gateway's view of the cluster (its first heartbeat read) before a create.
    for (let waited = 0; ; waited += 200) {
      const listed = await fetch(`${gatewayUrl}/v1/templates`, { headers: { authorization: `Bearer ${apiKey}` } });
      if (listed.ok && ((await listed.json()) as { templates: unknown[] }).templates.length > 0) break;
      if (waited > 30_000) throw new Error(`the gateway sees no node after 30 s:\n${gateway.output}\n${node.output}`);
      await sleep(200);
    }
    return { nodeUrl, gatewayUrl, secret, apiKey, nodePid: node.child.pid ?? 0, gatewayPid: gateway.child.pid ?? 0, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
