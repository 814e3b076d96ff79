import os from 'node:os';
import { Command, Option } from 'commander';
import { MIN_CLUSTER_SECRET_LENGTH } from '../api/auth/cluster-identity.js';
import { createGateway } from '../cluster/gateway/gateway.js';
import { gatewaySettingsFromEnv } from '../cluster/gateway/settings.js';
import { NodeAgent } from '../cluster/node/node-agent.js';
import { defaultNodeVcpus, nodeReport, type NodeFacts } from '../cluster/node/node-report.js';
import type { ClusterStore, NodeRecord } from '../cluster/store/cluster-store.js';
import { PgClusterStore } from '../cluster/store/pg-cluster-store.js';
import type { OrchestratorConfig } from '../config.js';
import { createLogger } from '../logger.js';
import { startOrchestrator, type Orchestrator } from '../orchestrator.js';
import { RUNTIMES } from '../runtimes/registered.js';
import { atLeast, envInt } from '../util/env.js';
import { addOrchestratorOptions, configOf, integer, stopOnSignals, type OrchestratorFlags } from './serve.js';

const VERSION = '0.1.0';

/**
 * The cluster's credential: from the environment only (a flag would show in `ps`). It and the
 * database URL are taken out of the environment once read, so that no child process (runc,
 * QEMU, ffmpeg, a template's build) inherits them.
 */
export function clusterSecret(): string {
  const secret = process.env.SBX_CLUSTER_SECRET ?? '';
  delete process.env.SBX_CLUSTER_SECRET;
  delete process.env.SBX_CLUSTER_DB_URL;
  if (secret.length < MIN_CLUSTER_SECRET_LENGTH) {
    throw new Error(
      `SBX_CLUSTER_SECRET must hold the cluster's credential, at least ${MIN_CLUSTER_SECRET_LENGTH} characters (the same on every node and gateway; e.g. \`openssl rand -base64 48\`)`,
    );
  }
  return secret;
}

const dbOption = () => new Option('--db <postgres-url>', "the cluster's database").env('SBX_CLUSTER_DB_URL').makeOptionMandatory();

/** Runs `fn` with the cluster's store, closed afterwards. */
export async function withClusterStore<T>(url: string, fn: (store: ClusterStore) => Promise<T>): Promise<T> {
  const store = new PgClusterStore({ url });
  try {
    await store.migrate();
    return await fn(store);
  } finally {
    await store.close();
  }
}

interface NodeFlags extends OrchestratorFlags {
  // Checked in the action, not by commander: a mandatory option of `node` would be asked of `node drain` too.
  cluster?: string;
  advertise?: string;
  name: string;
}

/** `sbx node`: today's orchestrator, a member of a cluster; `sbx node drain|undrain <name>`. */
function nodeCommand(defaults: OrchestratorConfig): Command {
  const node = addOrchestratorOptions(new Command('node').description("run a cluster's node (as root): the orchestrator, serving its gateways only"), defaults)
    .addOption(new Option('--cluster <postgres-url>', "the cluster's database (required)").env('SBX_CLUSTER_DB_URL'))
    .addOption(new Option('--advertise <url>', 'the URL gateways reach this node at, e.g. http://10.0.0.5:8080 (required)').env('SBX_NODE_ADVERTISE_URL'))
    .addOption(new Option('--name <name>', "this node's name in the cluster").env('SBX_NODE_NAME').default(os.hostname()))
    .action(async (flags: NodeFlags) => {
      const { cluster, advertise } = flags;
      if (!cluster || !advertise)
        throw new Error('sbx node needs --cluster <postgres-url> (SBX_CLUSTER_DB_URL) and --advertise <url> (SBX_NODE_ADVERTISE_URL)');
      const opts = { ...flags, cluster, advertise };
      const log = createLogger(undefined, defaults.logLevel);
      const config = configOf(opts, defaults);
      const heartbeatMs = atLeast('SBX_NODE_HEARTBEAT_MS', envInt('SBX_NODE_HEARTBEAT_MS', 2000, process.env), 100);
      const vcpus = atLeast('SBX_NODE_VCPUS', envInt('SBX_NODE_VCPUS', defaultNodeVcpus(), process.env), 1);
      let orchestrator: Orchestrator | undefined;
      let agent: NodeAgent | undefined;
      const store = new PgClusterStore({ url: opts.cluster, onIdleError: (err) => log.warn({ err }, 'a connection to the cluster database failed') });
      try {
        const secret = clusterSecret();
        await store.migrate();
        const started = await startOrchestrator(config, log, {
          anthropic: { apiKey: process.env.ANTHROPIC_API_KEY, baseURL: process.env.ANTHROPIC_BASE_URL },
          cluster: { secret },
        });
        orchestrator = started;
        const runtime = started.manager.runtimeName;
        const facts: NodeFacts = {
          url: opts.advertise,
          runtime,
          maxSessions: config.maxSessions,
          sessionMemoryMiB: config.memoryLimitMiB,
          memoryReserveMiB: config.memoryReserveMiB,
          // As the gateways count it (their settings read the same variables).
          sessionVcpus: RUNTIMES.vcpus(runtime, config.runtimes),
          vcpus,
          version: VERSION,
          templates: async () => (await started.templates.list()).filter((t) => t.built).map((t) => t.name),
          warm: () => Object.fromEntries(started.manager.warmPoolStatuses().map((pool) => [pool.template, pool.ready.length])),
        };
        agent = new NodeAgent({
          store,
          name: opts.name,
          heartbeatMs,
          report: () => nodeReport(facts),
          sessions: { ids: () => started.manager.registry.ids(), destroy: (id) => started.manager.destroy(id, 'node_lost') },
          log: log.child({ part: 'cluster' }),
        });
        await agent.start();
      } catch (err) {
        console.error(`sbx: ${err instanceof Error ? err.message : String(err)}`);
        await orchestrator?.close().catch(() => undefined);
        await store.close().catch(() => undefined);
        process.exit(1);
      }
      const member = agent;
      const running = orchestrator;
      stopOnSignals(log, async () => {
        await running.close();
        // Its sessions ended with the orchestrator: say so before leaving.
        await member.stop();
        await store.close();
      });
      console.error(
        `sbx: node ${opts.name} listening on http://${config.host}:${config.port}, advertised as ${opts.advertise} (runtime ${running.manager.runtimeName})`,
      );
    });
  for (const [verb, draining] of [
    ['drain', true],
    ['undrain', false],
  ] as const) {
    node
      .command(`${verb} <name>`)
      .description(draining ? 'no new sessions on this node; the ones it runs go on to their end' : 'take new sessions on this node again')
      .addOption(dbOption())
      .action(async (name: string, opts: { db: string }) => {
        const found = await withClusterStore(opts.db, (store) => store.setDraining(name, draining));
        if (!found) throw new Error(`no node called ${name} in the cluster (\`sbx nodes --db ...\` lists them)`);
        console.log(`${name} ${draining ? 'draining' : 'taking sessions'}`);
      });
  }
  node
    .command('remove <name>')
    .description('forget a lost node for good: its sessions and volumes leave the directory (their data was on that node)')
    .addOption(dbOption())
    .action(async (name: string, opts: { db: string }) => {
      const outcome = await withClusterStore(opts.db, (store) => store.removeNode(name));
      if (!outcome.removed) {
        throw new Error(
          outcome.why === 'missing'
            ? `no node called ${name} in the cluster (\`sbx nodes --db ...\` lists them)`
            : `${name} is not lost: only a node the cluster gave up can be removed (stop it; a gateway marks it lost within its lostAfter)`,
        );
      }
      console.log(`${name} removed: ${outcome.sessions} sessions and ${outcome.volumes} volumes forgotten`);
    });
  return node;
}

function percent(part: number, whole: number): string {
  return whole > 0 ? `${Math.round((100 * part) / whole)}%` : '-';
}

/** One line of `sbx nodes`. */
function nodeLine(n: NodeRecord, now: number): string {
  const age = Math.round((now - n.lastHeartbeat.getTime()) / 1000);
  const state = n.state === 'lost' ? 'LOST' : n.draining ? 'draining' : n.healthy ? 'up' : 'silent';
  const { capacity } = n;
  return [
    n.name.padEnd(20),
    state.padEnd(9),
    `${capacity.sessions}/${capacity.maxSessions} sessions`.padEnd(16),
    `mem ${percent(capacity.memoryMiB.committed, capacity.memoryMiB.total)}`.padEnd(9),
    `cpu ${percent(capacity.vcpus.committed, capacity.vcpus.total)}`.padEnd(9),
    `heard ${age}s ago`.padEnd(16),
    n.runtimes.join(',').padEnd(12),
    n.version.padEnd(8),
    n.url,
  ].join(' ');
}

/** `sbx nodes`: the cluster's nodes, their capacity and health. */
function nodesCommand(): Command {
  return new Command('nodes')
    .description("list the cluster's nodes: state, sessions, memory and CPU committed, last heartbeat")
    .addOption(dbOption())
    .option('--json', 'as JSON')
    .action(async (opts: { db: string; json?: boolean }) => {
      const nodes = await withClusterStore(opts.db, (store) => store.listNodes());
      if (opts.json) return console.log(JSON.stringify(nodes, null, 2));
      if (nodes.length === 0) console.error('sbx: no node has registered (start one with `sbx node --cluster <url> --advertise <url>`)');
      const now = Date.now();
      for (const n of nodes) console.log(nodeLine(n, now));
    });
}

/** `sbx gateway`: a stateless front of the cluster (any number of replicas). */
function gatewayCommand(defaults: OrchestratorConfig): Command {
  return new Command('gateway')
    .description("run a cluster's gateway: the same API as `sbx serve`, each request routed to the node that holds its session")
    .addOption(dbOption())
    .addOption(new Option('--host <host>', 'address to listen on').env('SBX_HOST').default(defaults.host))
    .addOption(new Option('--port <port>', 'port to listen on').env('SBX_PORT').default(defaults.port).argParser(integer))
    .action(async (opts: { db: string; host: string; port: number }) => {
      const log = createLogger(undefined, defaults.logLevel);
      const store = new PgClusterStore({ url: opts.db, onIdleError: (err) => log.warn({ err }, 'a connection to the cluster database failed') });
      let gateway: Awaited<ReturnType<typeof createGateway>>;
      try {
        const secret = clusterSecret();
        // Migrations run once whoever starts first: an advisory lock orders gateways starting together.
        await store.migrate();
        gateway = await createGateway({ store, secret, settings: gatewaySettingsFromEnv(process.env), logger: log });
        await gateway.start({ host: opts.host, port: opts.port });
      } catch (err) {
        console.error(`sbx: ${err instanceof Error ? err.message : String(err)}`);
        await store.close().catch(() => undefined);
        process.exit(1);
      }
      const running = gateway;
      stopOnSignals(
        log,
        async () => {
          await running.close();
          await store.close();
        },
        'shutting down (sessions live on their nodes)',
      );
      console.error(`sbx: gateway listening on http://${opts.host}:${opts.port}`);
    });
}

export function clusterCommands(defaults: OrchestratorConfig): Command[] {
  return [nodeCommand(defaults), nodesCommand(), gatewayCommand(defaults)];
}
