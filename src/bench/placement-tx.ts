/**
 * Issue 22's figure "creates per second that the placement transaction sustains": a real
 * PostgreSQL 15 of the bench's own (durable: fsync on, as a deployment has it), `nodes`
 * simulated nodes of mixed size registered and heartbeating every 2 s as real ones do (from
 * pgbench, another process, as nodes are), and
 * `clients` concurrent callers spread over `gateways` stores (each its own pool, as separate
 * gateway processes would be, all in this process: placement's scoring is the gateway's
 * CPU, counted here). Each caller loops place() then confirm() for `seconds`, after a
 * one-second warm-up; sessions are not ended (a create that fills the cluster is the
 * cluster's limit, not the transaction's: the nodes hold ~30x what a run places).
 */
import { randomUUID } from 'node:crypto';
import { execFile } from 'node:child_process';
import { access, constants, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PlacementRequest } from '../cluster/placement.js';
import type { NodeReport } from '../cluster/store/cluster-store.js';
import { PgClusterStore } from '../cluster/store/pg-cluster-store.js';
import { DEFAULT_POSTGRES_BIN_DIR, startThrowawayPostgres, type ThrowawayPostgres } from '../cluster/store/throwaway-postgres.js';
import { summarize, type Summary } from './stats.js';

export interface PlacementTxSettings {
  readonly nodes: number;
  readonly clients: number;
  readonly gateways: number;
  readonly seconds: number;
  /** Heartbeat every node every 2 s meanwhile (the real load on the nodes' rows). */
  readonly heartbeats: boolean;
  readonly durable: boolean;
}

export interface PlacementTxFigures {
  readonly nodes: number;
  readonly clients: number;
  readonly gateways: number;
  readonly seconds: number;
  readonly durable: boolean;
  readonly creates: number;
  readonly createsPerSecond: number;
  /** place() + confirm(), one caller's view. */
  readonly latencyMs: Summary;
  readonly heartbeatsPerSecond: number;
  readonly refused: number;
  /** CPU of this process (gateways' JavaScript: reading rows, scoring) per create, ms. */
  readonly gatewayCpuMsPerCreate: number;
  /**
   * CPU of PostgreSQL (server and backends) per create, ms: its CPU during the creates less its
   * CPU for the heartbeats alone (a control measured before them).
   */
  readonly databaseCpuMsPerCreate: number;
  /** Creates a second that one core would sustain, gateway and database together (the heartbeats' share left out): what the host's neighbours change least. */
  readonly createsPerCpuSecond: number;
}

export const HEARTBEAT_MS = 2000;
/** Seconds of heartbeats alone before the creates start: PostgreSQL's CPU for them. */
const CONTROL_SECONDS = 2;
const execFileAsync = promisify(execFile);

/** Nodes of 8 to 64 vCPUs with 2 or 4 GiB a vCPU, as in the placement simulation. */
function reportOf(i: number): NodeReport {
  const vcpus = 8 * (1 + (i % 8));
  return {
    url: `http://10.0.${i >> 8}.${i & 255}:8080`,
    runtimes: i % 5 === 0 ? ['container', 'qemu'] : ['container'],
    templates: i % 3 === 0 ? ['minimal', 'desktop'] : ['minimal'],
    warm: i % 7 === 0 ? { minimal: 2 } : {},
    maxSessions: vcpus * 2,
    memoryMiB: vcpus * (i % 2 === 0 ? 2048 : 4096),
    vcpus,
    sessionMemoryMiB: 1024,
    sessionVcpus: 1,
    version: 'bench',
  };
}

export async function measurePlacementTx(settings: PlacementTxSettings): Promise<PlacementTxFigures> {
  const server = await startThrowawayPostgres({ durable: settings.durable });
  const stores: PgClusterStore[] = [];
  try {
    const url = server.url;
    const admin = new PgClusterStore({ url, maxConnections: 8 });
    stores.push(admin);
    await admin.migrate();
    const names = Array.from({ length: settings.nodes }, (_, i) => nodeName(i));
    for (let i = 0; i < names.length; i += 50) {
      await Promise.all(names.slice(i, i + 50).map((name, j) => admin.registerNode(name, randomUUID(), reportOf(i + j))));
    }
    // The nodes' heartbeats come from other processes in a cluster: here from pgbench, at the
    // real rate (every node every 2 s), so their SQL loads PostgreSQL and not this process.
    const heartbeatRun = settings.heartbeats ? runHeartbeats(server, settings.nodes, CONTROL_SECONDS + settings.seconds + 1.5) : undefined;
    // The control: PostgreSQL's CPU for the heartbeats alone, subtracted from the creates' below.
    await sleep(200);
    const controlCpuBefore = server.cpuSeconds();
    await sleep(CONTROL_SECONDS * 1000);
    const controlCpuPerSecond = (server.cpuSeconds() - controlCpuBefore) / CONTROL_SECONDS;

    for (let i = 0; i < settings.gateways; i++) stores.push(new PgClusterStore({ url, maxConnections: Math.ceil(settings.clients / settings.gateways) }));
    const gateways = stores.slice(1);
    const requests: PlacementRequest[] = [
      { runtime: 'container', template: 'minimal', memoryMiB: 1024, vcpus: 1 },
      { runtime: 'container', template: 'minimal', memoryMiB: 2048, vcpus: 2 },
      { runtime: 'container', template: 'desktop', memoryMiB: 2048, vcpus: 1 },
    ];
    let measuring = false;
    let stop = false;
    let creates = 0;
    let refused = 0;
    const latencies: number[] = [];
    const caller = async (index: number): Promise<void> => {
      const store = gateways[index % gateways.length] as PgClusterStore;
      for (let n = 0; !stop; n++) {
        const id = randomUUID();
        const started = performance.now();
        const outcome = await store.place(id, `tenant-${index}`, requests[n % requests.length] as PlacementRequest, []);
        if (outcome.placed) await store.confirm(id);
        if (!measuring) continue;
        if (!outcome.placed) refused++;
        else {
          creates++;
          latencies.push(performance.now() - started);
        }
      }
    };
    const callers = Array.from({ length: settings.clients }, (_, i) => caller(i));
    await sleep(1000); // warm-up: every gateway's cache of the nodes' reports filled
    const cpuBefore = process.cpuUsage();
    const databaseCpuBefore = server.cpuSeconds();
    measuring = true;
    const started = performance.now();
    await sleep(settings.seconds * 1000);
    measuring = false;
    const elapsed = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const databaseCpu = Math.max(0, server.cpuSeconds() - databaseCpuBefore - controlCpuPerSecond * elapsed);
    const gatewayCpu = (cpu.user + cpu.system) / 1e6;
    stop = true;
    await Promise.all(callers);
    const heartbeats = heartbeatRun ? await heartbeatRun : { transactions: 0, seconds: 1 };
    return {
      nodes: settings.nodes,
      clients: settings.clients,
      gateways: settings.gateways,
      seconds: elapsed,
      durable: settings.durable,
      creates,
      createsPerSecond: creates / elapsed,
      latencyMs: summarize(latencies),
      heartbeatsPerSecond: heartbeats.transactions / heartbeats.seconds,
      refused,
      gatewayCpuMsPerCreate: (gatewayCpu * 1000) / creates,
      databaseCpuMsPerCreate: (databaseCpu * 1000) / creates,
      createsPerCpuSecond: creates / (gatewayCpu + databaseCpu),
    };
  } finally {
    await Promise.allSettled(stores.map((store) => store.close()));
    await server.stop();
  }
}

function nodeName(i: number): string {
  return `node-${String(i).padStart(6, '0')}`;
}

/**
 * pgbench sending one heartbeat's row write (last_heartbeat, and the check of whether the
 * report changed) for a random node, `nodes / 2` times a second, for `seconds`. Resolves to
 * the transactions it made.
 */
async function runHeartbeats(server: ThrowawayPostgres, nodes: number, seconds: number): Promise<{ transactions: number; seconds: number }> {
  const script = path.join(server.dir, 'heartbeat.sql');
  await writeFile(
    script,
    `\\set n random(0, ${nodes - 1})
UPDATE nodes SET last_heartbeat = now(), warm = warm,
  change_seq = CASE WHEN warm IS DISTINCT FROM warm THEN nextval('nodes_change_seq') ELSE change_seq END
  WHERE name = 'node-' || lpad(:n::text, 6, '0') AND state = 'up';
`,
  );
  const { stdout } = await execFileAsync(
    path.join(DEFAULT_POSTGRES_BIN_DIR, 'pgbench'),
    [
      '-n',
      '-c',
      '4',
      '-j',
      '1',
      '-R',
      String(nodes / (HEARTBEAT_MS / 1000)),
      '-T',
      String(Math.ceil(seconds)),
      '-f',
      script,
      '-h',
      '127.0.0.1',
      '-p',
      String(server.port),
      '-U',
      'sbx',
      'postgres',
    ],
    { timeout: (seconds + 30) * 1000 },
  );
  const processed = /number of transactions actually processed: (\d+)/.exec(stdout);
  return { transactions: Number(processed?.[1] ?? 0), seconds: Math.ceil(seconds) };
}

/** The figure, or null (said on stderr) when this host has no PostgreSQL 15 to start or the measurement failed. */
export async function measurePlacementTxIfPossible(settings: PlacementTxSettings): Promise<PlacementTxFigures | null> {
  try {
    await access(path.join(DEFAULT_POSTGRES_BIN_DIR, 'postgres'), constants.X_OK);
  } catch {
    console.error(
      `bench: no PostgreSQL 15 in ${DEFAULT_POSTGRES_BIN_DIR} (Debian's postgresql, installed by scripts/setup.sh): placement transaction not measured`,
    );
    return null;
  }
  try {
    return await measurePlacementTx(settings);
  } catch (error) {
    // The rest of the bench does not depend on it: say why, and go on without the figure.
    console.error(`bench: placement transaction not measured: ${error instanceof Error ? error.message : String(error)}`);
    return null;
  }
}

export function describePlacementTx(f: PlacementTxFigures): string {
  return (
    `placement transaction: ${f.createsPerSecond.toFixed(0)} creates/s (place + confirm) over ${f.seconds.toFixed(1)} s, ` +
    `${f.nodes} nodes heartbeating ${f.heartbeatsPerSecond.toFixed(0)}/s, ${f.clients} callers on ${f.gateways} gateways, ` +
    `PostgreSQL ${f.durable ? 'durable (fsync on)' : 'fsync off'}: p50 ${f.latencyMs.p50.toFixed(1)} ms, p95 ${f.latencyMs.p95.toFixed(1)} ms, ` +
    `${f.refused} refused; CPU a create: gateway ${f.gatewayCpuMsPerCreate.toFixed(2)} ms, PostgreSQL ${f.databaseCpuMsPerCreate.toFixed(2)} ms beyond the heartbeats' ` +
    `(${f.createsPerCpuSecond.toFixed(0)} creates per CPU-second)`
  );
}
