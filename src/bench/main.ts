#!/usr/bin/env node
/**
 * `npm run bench`: sessions on the default runtime (SBX_RUNTIME=qemu for the qemu one; its
 * boots are labelled kvm or tcg), measured side by side in one run: create-to-ready (cold,
 * and from the warm pool); screenshots over the HTTP API against scrot in the guest, with
 * the CPU of each, on a static screen, on a screen changing every frame and 1920x1080
 * scaled to 1366x768; every pointer and key action against the same requests in the guest;
 * a fresh `ssh` process per command (the naive design); the host memory of an idle session;
 * 16 sessions under load with the orchestrator's event-loop delay; and the most sessions
 * that load can run. Prints tables, writes bench-results.json and draws bench-chart.png.
 *
 * Settings (read here only): BENCH_N (samples per figure, 50), BENCH_CREATES (creates timed,
 * 5), BENCH_LOAD_SESSIONS (16), BENCH_LOAD_SECONDS (60; e.g. 5 for a quick run),
 * BENCH_LOAD_INTERVAL_MS (250), BENCH_RAMP_MAX (128), BENCH_RAMP_STEP (8), BENCH_RAMP_SECONDS (20),
 * BENCH_RECORDING_SECONDS (10: each CPU window of the recording figures), BENCH_PLACEMENT_NODES
 * (1000), BENCH_PLACEMENT_CLIENTS (8), BENCH_PLACEMENT_GATEWAYS (4), BENCH_PLACEMENT_SECONDS
 * (10): the placement transaction on a PostgreSQL of its own (issue 22), measured first.
 * `npm run bench -- placement-tx` measures that alone (no sandbox, no root needed).
 * Then issue 22's gateway figures (gateway.ts: a node, a gateway and PostgreSQL as processes;
 * BENCH_N screenshots, BENCH_GATEWAY_ACTIONS (200) actions, BENCH_LIVE_VIEW_SECONDS (10) of
 * live view each way) and the placement simulation; `npm run bench -- gateway` runs those alone.
 * Issue 24's guest-port and CDP figures (guest-ports.ts): `npm run bench -- ports` runs those alone.
 * Issue 27's create figures (create-bench.ts): `npm run bench -- create` (BENCH_CREATES, 10 there on
 * containers, 3 on QEMU and Firecracker; SBX_RUNTIME=qemu adds a fork's warm path and a bare boot's floor).
 * The 16-session load alone (load-alone.ts, its event-loop delay: issue 27): `npm run bench -- load`;
 * then the ramp from it (the most sessions it passes at, up to BENCH_RAMP_MAX): `-- ramp`.
 * The recording figures alone (recording-alone.ts, issue 27's 8 % goal): `npm run bench -- recording`.
 */
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxClient, type Sandbox } from '../client/index.js';
import { INPUT_COMMAND } from '../computer/input-channel.js';
import { defaultConfig } from '../config.js';
import { CONFIG_FILES } from '../guest/contract.js';
import { guestAddressOf } from '../network/netns.js';
import { startOrchestrator } from '../orchestrator.js';
import { measureActions } from './actions.js';
import { naiveSsh, timeInputInGuest } from './baselines.js';
import { writeChart } from './chart.js';
import { openDirect } from './direct.js';
import { goalRows, printGoals, SCREENSHOT_FORMATS, type ScreenshotFormat } from './goals.js';
import { measureIdleMemory } from './idle-memory.js';
import { runLoad } from './load.js';
import { describeLoad, measureLoadAlone } from './load-alone.js';
import { benchConfig } from './bench-config.js';
import { rampSessions } from './ramp.js';
import { measureRecording } from './recording.js';
import { describeRecordingAlone, measureRecordingAlone } from './recording-alone.js';
import { buildResults, printReport } from './report.js';
import { compareScreenshots, staticAndChanging } from './screenshots.js';
import { summarize, timeIt } from './stats.js';
import { measureWarmCreates } from './warm-create.js';
import { printCreateFigures } from './create-bench.js';
import { measurePause, pauseAlone } from './pause.js';
import { diskPauseAlone } from './disk-pause.js';
import { snapshotsAlone } from './snapshots.js';
import { measureTemplate, type TemplateFigures } from './templates.js';
import { measureLoopOverhead, startZeroLatencyModel } from './run-loop.js';
import { measureProcessStart } from './processes.js';
import { describePlacementTx, measurePlacementTx, measurePlacementTxIfPossible, type PlacementTxSettings } from './placement-tx.js';
import { describeGateway, measureGateway, type GatewayBenchSettings } from './gateway.js';
import { measurePortsWithDesktop, portsAlone } from './ports-alone.js';
import { describeTransports, measureTransports } from './transports.js';
import { describeE2bDesktop, measureE2bDesktop } from './e2b-desktop.js';
import { describeSimulation, simulatePlacement, SIMULATION_SEEDS, type SimulationFigures } from './placement-simulation.js';

const N = Number(process.env.BENCH_N || 50);
const CREATES = Number(process.env.BENCH_CREATES || 5);
const LOAD_SESSIONS = Number(process.env.BENCH_LOAD_SESSIONS || 16);
const LOAD_SECONDS = Number(process.env.BENCH_LOAD_SECONDS || 60);
const LOAD_INTERVAL_MS = Number(process.env.BENCH_LOAD_INTERVAL_MS || 250);
const RAMP_MAX = Number(process.env.BENCH_RAMP_MAX || 128);
const RAMP_STEP = Number(process.env.BENCH_RAMP_STEP || 8);
const RAMP_SECONDS = Number(process.env.BENCH_RAMP_SECONDS || 20);
const RECORDING_SECONDS = Number(process.env.BENCH_RECORDING_SECONDS || 10);
/** Templates whose create-to-ready (cold, warm) and idle memory are measured (issue 14); a template not built is skipped. */
const TEMPLATES = (process.env.BENCH_TEMPLATES ?? 'minimal,desktop')
  .split(',')
  .map((t) => t.trim())
  .filter(Boolean);
const TEMPLATE_IDLE_SESSIONS = Number(process.env.BENCH_TEMPLATE_IDLE_SESSIONS || 4);
const PLACEMENT_TX: PlacementTxSettings = {
  nodes: Number(process.env.BENCH_PLACEMENT_NODES || 1000),
  clients: Number(process.env.BENCH_PLACEMENT_CLIENTS || 8),
  gateways: Number(process.env.BENCH_PLACEMENT_GATEWAYS || 4),
  seconds: Number(process.env.BENCH_PLACEMENT_SECONDS || 10),
  heartbeats: true,
  durable: true,
};
const GATEWAY: GatewayBenchSettings = {
  n: N,
  actionN: Number(process.env.BENCH_GATEWAY_ACTIONS || Math.max(200, 4 * N)),
  liveViewSeconds: Number(process.env.BENCH_LIVE_VIEW_SECONDS || 10),
  display: defaultConfig(process.env).display,
  imagesDir: defaultConfig(process.env).imagesDir,
  env: process.env,
  gatewayNodeOptions: (process.env.BENCH_GATEWAY_NODE_OPTIONS ?? '').split(' ').filter(Boolean),
  // The node's sandboxes: apart from the bench's own orchestrator (10.244/16) and the tests' nodes (10.247/16).
  resourcePrefix: 'sbg-',
  subnet: '10.245.0.0/24',
};

/** The placement simulation over each seed (a few seconds of CPU): the worst is the figure. */
function simulations(): SimulationFigures[] {
  const runs = SIMULATION_SEEDS.map((seed) => simulatePlacement(seed));
  for (const run of runs) console.error(`bench: ${describeSimulation(run)}`);
  return runs;
}

async function main(): Promise<void> {
  // First, while nothing else of the bench runs: it needs no sandbox.
  console.error(
    `bench: placement transaction: ${PLACEMENT_TX.nodes} simulated nodes on a PostgreSQL of its own, ${PLACEMENT_TX.clients} callers, ${PLACEMENT_TX.seconds} s`,
  );
  const placementTx = await measurePlacementTxIfPossible(PLACEMENT_TX);
  const simulation = simulations();
  // Before the bench's own orchestrator starts: the node here is another orchestrator, with sandboxes of its own.
  console.error('bench: gateway: a node, a gateway and PostgreSQL, each its own process');
  const gateway = placementTx === null ? null : await measureGateway(GATEWAY); // null: no PostgreSQL here (said above)
  if (gateway) console.error(describeGateway(gateway));
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-'));
  // The pool starts empty whatever SBX_WARM_POOL_SIZE says: cold creates must be cold. It is
  // grown for the warm figure only (measureWarmCreates).
  const defaults = defaultConfig(process.env);
  const mostSessions = Math.max(LOAD_SESSIONS, RAMP_MAX) + 4;
  const config = benchConfig(defaults, mostSessions, { stateDir, subnet: process.env.SBX_SUBNET || '10.244.0.0/16' });

  console.error('bench: transports: containers over TCP and over a Unix socket, each on an orchestrator of its own');
  const transports = await measureTransports(config, CREATES, N);
  console.error(describeTransports(transports));
  // The built-in loop talks to a stand-in with zero latency: the figure is the loop's own cost.
  const model = await startZeroLatencyModel();
  const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), {
    buildImageIfMissing: false,
    anthropic: { apiKey: 'bench', baseURL: model.url },
  });
  const address = orchestrator.server.server.address();
  if (!address || typeof address === 'string') throw new Error('server has no TCP address');
  const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
  const names = orchestrator.names;
  const display = config.display;
  try {
    console.error(`bench: runtime ${orchestrator.manager.runtimeName}, ${os.cpus().length} cores, N=${N}`);

    const createMs = await timeIt(CREATES, async () => (await client.create()).destroy(), 0);
    // VM runtimes label their boots with the accelerator: KVM and TCG differ tenfold.
    const accel = (await orchestrator.metrics.vmBootDuration.get()).values.find((v) => v.labels.accel !== undefined)?.labels.accel;
    const sandbox = await client.create({ width: 1024, height: 768 });
    const direct = await openDirect(stateDir, names, sandbox.id);

    const screenshots = {} as Record<ScreenshotFormat, Awaited<ReturnType<typeof staticAndChanging>>>;
    for (const format of SCREENSHOT_FORMATS) {
      console.error(`bench: ${format} screenshots, static screen, then a screen changing every frame`);
      screenshots[format] = await staticAndChanging({
        sandbox,
        direct,
        names,
        display,
        n: N,
        baseUrl: client.baseUrl,
        shot: { scaled: false, format: { format } },
      });
    }

    const apiMove = await timeIt(N, (i) => sandbox.mouseMove(100 + (i % 2) * 200, 100 + (i % 2) * 100));
    const guestMove = await timeInputInGuest(direct, display, INPUT_COMMAND, 'move 300 200\n', N);
    console.error('bench: pointer and key actions');
    const actions = await measureActions(sandbox, direct, display, N);
    console.error("bench: recording at 5 fps: CPU and the same session's screenshot latency, static then changing screen");
    const recording = await measureRecording({ sandbox, direct, names, display, n: N, cpuSeconds: RECORDING_SECONDS });
    const loop = await measureLoopOverhead(client, sandbox, N);
    console.error('bench: process start to first output byte (echo)');
    const processStart = await measureProcessStart(sandbox, direct, N);
    console.error('bench: guest ports: a GET through the port and in the guest, a download through the port and over SFTP, CDP round trips');
    const ports = await measurePortsWithDesktop(client, sandbox, direct, N, TEMPLATES.includes('desktop'));
    direct.close();

    // A large screen scaled to FWXGA (1366x768) on the host: capture plus scaling over the API.
    console.error('bench: 1920x1080 scaled to 1366x768');
    const large = await client.create({ width: 1920, height: 1080 });
    const largeDirect = await openDirect(stateDir, names, large.id);
    const scaled = {} as Record<ScreenshotFormat, Awaited<ReturnType<typeof compareScreenshots>>>;
    for (const format of SCREENSHOT_FORMATS) {
      scaled[format] = await compareScreenshots({
        sandbox: large,
        direct: largeDirect,
        names,
        display,
        n: N,
        baseUrl: client.baseUrl,
        shot: { scaled: true, format: { format } },
      });
    }
    largeDirect.close();
    await large.destroy();

    const sessionDir = path.join(stateDir, sandbox.id);
    const ssh = await naiveSsh({
      keyFile: path.join(sessionDir, 'id_ed25519'),
      hostPublicKey: await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKeyPub), 'utf8'),
      address: await guestAddressOf(names, sandbox.id),
      workDir: stateDir,
    });
    const naiveN = Math.min(N, 20);
    const naiveShot = await timeIt(naiveN, () => ssh(`DISPLAY=:${display} scrot -`), 1);
    const naiveMove = await timeIt(naiveN, (i) => ssh(`DISPLAY=:${display} xdotool mousemove ${100 + (i % 2) * 200} 100`), 1);
    await sandbox.destroy();

    const warmMs = await measureWarmCreates(orchestrator.manager, client, CREATES);
    console.error('bench: memory pause and resume');
    const pause = await measurePause(client, CREATES);

    const templates: TemplateFigures[] = [];
    for (const template of TEMPLATES) {
      console.error(`bench: template ${template}: cold and warm creates, ${TEMPLATE_IDLE_SESSIONS} idle sessions`);
      const figures = await measureTemplate({ client, manager: orchestrator.manager, names, template, creates: CREATES, idle: TEMPLATE_IDLE_SESSIONS });
      if (figures) templates.push(figures);
    }

    // The load's sessions are made first and measured idle: that is the memory figure.
    const rssBefore = process.memoryUsage.rss();
    const loadSandboxes: Sandbox[] = [];
    const create = () => client.create({ width: 1024, height: 768 });
    try {
      for (let i = 0; i < LOAD_SESSIONS; i++) loadSandboxes.push(await create());
      // Idle as between an agent's steps: used once (capture and input helpers running), then left.
      for (const s of loadSandboxes) {
        await s.screenshot();
        await s.leftClick(1000, 700);
      }
      await sleep(3_000);
      const memory =
        orchestrator.manager.runtimeName === 'container'
          ? await measureIdleMemory(
              names,
              loadSandboxes.map((s) => s.id),
              rssBefore,
            )
          : undefined;
      console.error(`bench: load: ${LOAD_SESSIONS} sessions, a screenshot and a click every ${LOAD_INTERVAL_MS} ms each, for ${LOAD_SECONDS} s`);
      const load = await runLoad(
        client.baseUrl,
        loadSandboxes.map((s) => s.id),
        LOAD_INTERVAL_MS,
        LOAD_SECONDS * 1000,
      );
      console.error(`bench: ramp: +${RAMP_STEP} sessions at a time up to ${RAMP_MAX}, ${RAMP_SECONDS} s each`);
      const ramp = await rampSessions({
        client,
        sandboxes: loadSandboxes,
        first: load,
        step: RAMP_STEP,
        max: RAMP_MAX,
        seconds: RAMP_SECONDS,
        intervalMs: LOAD_INTERVAL_MS,
        create,
      });

      const results = buildResults({
        runtime: orchestrator.manager.runtimeName,
        accelerator: accel === undefined ? null : String(accel),
        cores: os.cpus().length,
        create: summarize(createMs),
        warm: warmMs.length > 0 ? summarize(warmMs) : null,
        screenshots,
        scaled,
        mouseMove: { api: summarize(apiMove), guest: summarize(guestMove), freshSsh: summarize(naiveMove) },
        screenshotFreshSsh: summarize(naiveShot),
        actions,
        load,
        loadSeconds: LOAD_SECONDS,
        loadIntervalMs: LOAD_INTERVAL_MS,
        ramp,
        memory: memory ?? null,
        recording,
        loop,
        processStart,
        templates,
        placementTx,
        gateway,
        ports,
        simulation,
        pause,
        transports,
      });
      printReport(results);
      const goals = goalRows(results);
      printGoals(goals, results.cores);
      await writeFile('bench-results.json', JSON.stringify(results, null, 2) + '\n');
      await writeChart('bench-chart.png', `Sandbox Orchestrator bench: ${results.runtime}, ${results.cores} cores, 1024x768`, goals);
      console.error('bench: wrote bench-results.json and bench-chart.png');
    } finally {
      await Promise.allSettled(loadSandboxes.map((s) => s.destroy()));
    }
  } finally {
    await orchestrator.close();
    await model.close();
    // Never through a mount: a sandbox view left mounted keeps the state dir (and says so).
    await removeTreeOnOneMount(stateDir);
  }
}

async function placementTxAlone(): Promise<void> {
  const figures = await measurePlacementTx(PLACEMENT_TX);
  console.log(describePlacementTx(figures));
  console.log(JSON.stringify(figures, null, 2));
}

async function gatewayAlone(): Promise<void> {
  const simulation = simulations();
  const figures = await measureGateway(GATEWAY);
  console.log(describeGateway(figures));
  for (const run of simulation) console.log(describeSimulation(run));
  console.log(JSON.stringify({ ...figures, simulation }, null, 2));
}

/** `npm run bench -- pause`: the memory pause and resume figures alone (BENCH_CREATES rounds, 20 unless set). */
async function pauseAloneHere(): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-pause-'));
  const config = { ...defaultConfig(process.env), stateDir, port: 0, subnet: process.env.SBX_SUBNET || '10.244.0.0/16', warmPoolSize: 0 };
  await pauseAlone(config, Number(process.env.BENCH_CREATES || 20)).finally(() => removeTreeOnOneMount(stateDir));
}

/** `npm run bench -- transports`: issue 23's figures alone. */
async function transportsAlone(): Promise<void> {
  const config = { ...defaultConfig(process.env), subnet: process.env.SBX_SUBNET || '10.244.0.0/16' };
  const figures = await measureTransports(config, CREATES, N);
  console.log(describeTransports(figures));
  console.log(JSON.stringify(figures, null, 2));
}

// A VM's boot under TCG (QEMU, or the Firecracker stand-in's guest) on a loaded host may take minutes: the timeouts are raised unless set.
const VM_TIMEOUTS = { SBX_QEMU_BOOT_TIMEOUT_MS: '300000', SBX_FC_BOOT_TIMEOUT_MS: '300000' };
const CREATE = {
  config: { ...defaultConfig({ ...VM_TIMEOUTS, ...process.env }), subnet: process.env.SBX_SUBNET || '10.244.0.0/16' },
  // Unset: 10 on containers, 3 on a VM runtime (create-bench.ts).
  creates: process.env.BENCH_CREATES ? Number(process.env.BENCH_CREATES) : undefined,
};

async function loadAlone(withRamp: boolean): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-load-'));
  const subnet = process.env.SBX_SUBNET || '10.244.0.0/16';
  const config = benchConfig(defaultConfig(process.env), (withRamp ? RAMP_MAX : LOAD_SESSIONS) + 4, { stateDir, subnet });
  const ramp = withRamp ? { step: RAMP_STEP, max: RAMP_MAX, seconds: RAMP_SECONDS } : undefined;
  try {
    console.log(describeLoad(await measureLoadAlone({ config, sessions: LOAD_SESSIONS, intervalMs: LOAD_INTERVAL_MS, seconds: LOAD_SECONDS, ramp })));
  } finally {
    await removeTreeOnOneMount(stateDir);
  }
}

const PARTS: Record<string, () => Promise<void>> = {
  'placement-tx': placementTxAlone,
  gateway: gatewayAlone,
  pause: pauseAloneHere,
  // Pause to disk of a QEMU desktop (SBX_RUNTIME to choose another), BENCH_CREATES rounds (3 unless set).
  'disk-pause': () =>
    diskPauseAlone(
      { ...defaultConfig({ SBX_RUNTIME: 'qemu', SBX_QEMU_BOOT_TIMEOUT_MS: '300000', ...process.env }), subnet: process.env.SBX_SUBNET || '10.244.0.0/16' },
      Number(process.env.BENCH_CREATES || 3),
    ),
  // Snapshot and forks of a QEMU desktop (SBX_RUNTIME to choose another), BENCH_CREATES forks (3 unless set).
  snapshots: () =>
    snapshotsAlone(
      { ...defaultConfig({ SBX_RUNTIME: 'qemu', SBX_QEMU_BOOT_TIMEOUT_MS: '300000', ...process.env }), subnet: process.env.SBX_SUBNET || '10.244.0.0/16' },
      Number(process.env.BENCH_CREATES || 3),
    ),
  ports: () => portsAlone({ ...defaultConfig(process.env), subnet: process.env.SBX_SUBNET || '10.244.0.0/16' }, N, TEMPLATES.includes('desktop')),
  transports: transportsAlone,
  load: () => loadAlone(false),
  ramp: () => loadAlone(true),
  create: () => printCreateFigures(CREATE),
  recording: async () => {
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-recording-'));
    const config = benchConfig(defaultConfig(process.env), 1, { stateDir, subnet: process.env.SBX_SUBNET || '10.244.0.0/16' });
    try {
      const figures = await measureRecordingAlone({ config, n: N, cpuSeconds: RECORDING_SECONDS });
      console.log(describeRecordingAlone(figures));
      console.log(JSON.stringify(figures, null, 2));
    } finally {
      await removeTreeOnOneMount(stateDir);
    }
  },
  e2b: async () => {
    // BENCH_E2B_PROFILE=<group>[,<group>] (screenshot, leftClick, read, command): the orchestrator's CPU profile of each, to e2b-<group>.cpuprofile.
    const profile = (process.env.BENCH_E2B_PROFILE ?? '').split(',').filter(Boolean);
    const figures = await measureE2bDesktop({ ...defaultConfig(process.env), subnet: process.env.SBX_SUBNET || '10.244.0.0/16' }, N, profile);
    console.log(describeE2bDesktop(figures));
    console.log(JSON.stringify(figures, null, 2));
  },
};
(PARTS[process.argv[2] ?? ''] ?? main)().catch((err: unknown) => {
  console.error(`bench: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
