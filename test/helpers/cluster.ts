/**
 * A real cluster on this host (issue 22): a PostgreSQL 15 of the test file's own, N nodes
 * (`sbx node`, the built CLI, each with its own resource prefix, subnet, uid ranges, state
 * dir and port) and M gateways (`sbx gateway`), as an operator would run them.
 */
import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rmdir } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ResourceNames } from '../../src/network/names.js';
import { removeTreeOnOneMount } from '../../src/host/remove-tree.js';
import { startThrowawayPostgres } from '../../src/cluster/store/throwaway-postgres.js';
import type { TestPostgres } from './postgres.js';
import { TEST_PREFIX } from './orchestrator.js';
import { runCliWith } from './serve.js';

const CLI = path.resolve('dist/cli/main.js');
/** Random per test process: another suite's cluster on this host holds its own. */
export const CLUSTER_SECRET = `test-cluster-secret-${randomBytes(16).toString('hex')}`;

export async function freePort(): Promise<number> {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  server.close();
  return port;
}

/** A child process of the CLI, its output kept for failure messages. */
export class CliProcess {
  output = '';
  child: ChildProcess | undefined;

  constructor(
    readonly args: string[],
    readonly env: Record<string, string>,
  ) {}

  start(): void {
    const child = spawn(process.execPath, [CLI, ...this.args], {
      env: { ...process.env, SBX_LOG_LEVEL: 'info', ...this.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.on('data', (d: Buffer) => (this.output += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (this.output += d.toString()));
    this.child = child;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  async kill(signal: NodeJS.Signals): Promise<void> {
    const child = this.child;
    if (!child || !this.running) return;
    const closed = once(child, 'close');
    child.kill(signal);
    await closed;
  }

  /** Waits until `url` answers 200 (the process's /healthz). */
  async waitHealthy(url: string, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!this.running) throw new Error(`${this.args[0]} exited early:\n${this.output.slice(-4000)}`);
      try {
        if ((await fetch(`${url}/healthz`)).ok) return;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`${this.args[0]} did not become healthy:\n${this.output.slice(-4000)}`);
  }
}

export interface ClusterNode {
  name: string;
  url: string;
  prefix: string;
  names: ResourceNames;
  stateDir: string;
  process: CliProcess;
  /** Starts it again (same name, prefix, state dir and port) after a kill. */
  restart(): Promise<void>;
}

export interface ClusterGateway {
  url: string;
  process: CliProcess;
  restart(): Promise<void>;
}

export interface TestCluster {
  pg: TestPostgres;
  nodes: ClusterNode[];
  gateways: ClusterGateway[];
  /** `Authorization` headers of a key of tenant `acme`, and of `other`. */
  acme: Record<string, string>;
  other: Record<string, string>;
  /** Runs a CLI command against the cluster's database. */
  cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }>;
  stop(): Promise<void>;
}

export interface NodeSpec {
  name: string;
  /** SBX_NODE_VCPUS: what it offers placement. */
  vcpus: number;
  env?: Record<string, string>;
}

const usedPrefixes = new Set([TEST_PREFIX]);
function nodePrefix(): string {
  for (;;) {
    const prefix = `t${String.fromCharCode(97 + Math.floor(Math.random() * 26))}${String.fromCharCode(97 + Math.floor(Math.random() * 26))}-`;
    if (!usedPrefixes.has(prefix) && prefix !== 'tdb-') {
      usedPrefixes.add(prefix);
      return prefix;
    }
  }
}

export async function startCluster(specs: NodeSpec[], gatewayCount: number, sharedEnv: Record<string, string> = {}): Promise<TestCluster> {
  // Not test/helpers/postgres.ts: its after() hook, registered from a before() hook, would stop it at once.
  const pg = await startThrowawayPostgres();
  // Each node promises every session its writable layer and artifact caps on the one disk they
  // share here (4.3 GiB a session by default): at 55 GiB free, CI refused the 13th session on a
  // node with host_disk_low. The tests write little; 1.1 GiB a session keeps 30 of them in room.
  const common = {
    SBX_CLUSTER_SECRET: CLUSTER_SECRET,
    SBX_CLUSTER_DB_URL: pg.url,
    SBX_TEMPLATE: 'minimal',
    SBX_RUNTIME: 'container',
    SBX_DISK_MIB: '1024',
    SBX_RECORDING_MAX_BYTES: String(64 * 2 ** 20),
    ...sharedEnv,
  };
  const nodes: ClusterNode[] = [];
  const gateways: ClusterGateway[] = [];
  const thirdOctets = new Set<number>();
  const cluster: TestCluster = {
    pg,
    nodes,
    gateways,
    acme: {},
    other: {},
    cli: (args) => runCliWith(args, common),
    async stop() {
      await Promise.all(gateways.map((g) => g.process.kill('SIGKILL')));
      // SIGTERM: each node destroys its sessions, as on any shutdown.
      await Promise.all(nodes.map((n) => n.process.kill('SIGTERM')));
      for (const node of nodes) {
        await removeTreeOnOneMount(node.stateDir).catch(() => undefined);
        await rmdir(node.names.runcRoot).catch(() => undefined);
        await rmdir(node.names.rootfsRoot).catch(() => undefined);
      }
      await pg.stop();
    },
  };
  try {
    for (const spec of specs) {
      const prefix = nodePrefix();
      let octet: number;
      do octet = 1 + Math.floor(Math.random() * 250);
      while (thirdOctets.has(octet));
      thirdOctets.add(octet);
      const port = await freePort();
      const stateDir = await mkdtemp(path.join(os.tmpdir(), `sbx-node-${spec.name}-`));
      const url = `http://127.0.0.1:${port}`;
      const proc = new CliProcess(['node', '--name', spec.name, '--advertise', url, '--port', String(port), '--state-dir', stateDir], {
        ...common,
        SBX_RESOURCE_PREFIX: prefix,
        SBX_SUBNET: `10.247.${octet}.0/24`,
        SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
        SBX_NODE_VCPUS: String(spec.vcpus),
        ...spec.env,
      });
      const node: ClusterNode = {
        name: spec.name,
        url,
        prefix,
        names: new ResourceNames(prefix),
        stateDir,
        process: proc,
        async restart() {
          proc.start();
          await proc.waitHealthy(url);
        },
      };
      nodes.push(node);
    }
    // Started one at a time: they would race for the first migration otherwise (that race is the store test's).
    for (const node of nodes) await node.restart();
    for (let i = 0; i < gatewayCount; i++) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const proc = new CliProcess(['gateway', '--port', String(port)], common);
      const gateway: ClusterGateway = {
        url,
        process: proc,
        async restart() {
          proc.start();
          await proc.waitHealthy(url);
        },
      };
      gateways.push(gateway);
    }
    await Promise.all(gateways.map((g) => g.restart()));
    for (const [tenant, headers] of [
      ['acme', cluster.acme],
      ['other', cluster.other],
    ] as const) {
      const made = await cluster.cli(['keys', 'create', '--tenant', tenant, '--db', pg.url]);
      if (made.code !== 0) throw new Error(`sbx keys create failed: ${made.stderr}`);
      headers.authorization = `Bearer ${made.stdout.trim()}`;
    }
    return cluster;
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}
