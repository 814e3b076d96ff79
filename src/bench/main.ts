#!/usr/bin/env node
/**
 * `npm run bench`: one session on the default runtime (SBX_RUNTIME=qemu for the qemu one;
 * its boots are labelled kvm or tcg), measured side by side in one run:
 * create-to-ready (cold, and from the warm pool), screenshot and mouse_move over the HTTP
 * API, the same commands run inside the guest (the floor), a fresh `ssh` process per command
 * (the naive design), then 16 sessions under load and the host memory of an idle session.
 * Prints tables, writes bench-results.json and draws bench-chart.png.
 *
 * Settings: BENCH_N (samples per figure, 50), BENCH_CREATES (creates timed, 5),
 * BENCH_LOAD_SESSIONS (16), BENCH_LOAD_SECONDS (60; e.g. 5 for a quick run),
 * BENCH_LOAD_INTERVAL_MS (250).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxClient, type ComputerToolInput, type Sandbox } from '../client/index.js';
import { parseAction } from '../computer/actions.js';
import { Scaler } from '../computer/scaling.js';
import { INPUT_COMMAND, requestLine } from '../computer/input-channel.js';
import { inputPlan, isPointerOrKeyAction } from '../computer/input-requests.js';
import type { ResourceNames } from '../network/names.js';
import { defaultConfig } from '../config.js';
import { CONFIG_FILES, GUEST_USER } from '../guest/contract.js';
import { guestAddressOf } from '../network/netns.js';
import { startOrchestrator } from '../orchestrator.js';
import { publicKeyBlob } from '../transport/keys.js';
import { GuestConnection } from '../transport/ssh-connection.js';
import { naiveSsh, timeInGuest, timeInputInGuest } from './baselines.js';
import { writeChart } from './chart.js';
import { goalRows, printGoals } from './goals.js';
import { measureIdleMemory } from './idle-memory.js';
import { runLoad } from './load.js';
import { summarize, timeIt, type Summary } from './stats.js';
import { measureWarmCreates } from './warm-create.js';

const N = Number(process.env.BENCH_N || 50);
const CREATES = Number(process.env.BENCH_CREATES || 5);
const LOAD_SESSIONS = Number(process.env.BENCH_LOAD_SESSIONS || 16);
const LOAD_SECONDS = Number(process.env.BENCH_LOAD_SECONDS || 60);
const LOAD_INTERVAL_MS = Number(process.env.BENCH_LOAD_INTERVAL_MS || 250);

async function main(): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-'));
  // The pool starts empty whatever SBX_WARM_POOL_SIZE says: cold creates must be cold. It is
  // grown for the warm figure only (measureWarmCreates).
  const defaults = defaultConfig(process.env);
  const config = {
    ...defaults,
    stateDir,
    port: 0,
    subnet: process.env.SBX_SUBNET || '10.244.0.0/16',
    warmPoolSize: 0,
    // The load runs LOAD_SESSIONS sessions for one (keyless, local) tenant at once: the
    // default per-tenant and host limits are for clients, not for the benchmark itself.
    maxSessions: Math.max(defaults.maxSessions, LOAD_SESSIONS + 4),
    maxSessionsPerTenant: Math.max(defaults.maxSessionsPerTenant, LOAD_SESSIONS + 4),
    // Likewise the request limits: the load alone sends LOAD_SESSIONS x 2 requests every
    // LOAD_INTERVAL_MS (128/s by default, over the 50/s default), and the sequential phases
    // send as fast as the orchestrator answers. The bench measures the orchestrator, not the limiter.
    tenantRequestsPerSecond: Math.max(defaults.tenantRequestsPerSecond, 1_000),
    tenantRequestBurst: Math.max(defaults.tenantRequestBurst, 1_000),
    tenantMaxConcurrentRequests: Math.max(defaults.tenantMaxConcurrentRequests, LOAD_SESSIONS * 4),
  };
  const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  const address = orchestrator.server.server.address();
  if (!address || typeof address === 'string') throw new Error('server has no TCP address');
  const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
  try {
    console.error(`bench: runtime ${orchestrator.manager.runtimeName}, ${os.cpus().length} cores, N=${N}`);

    const createMs = await timeIt(CREATES, async () => (await client.create()).destroy(), 0);
    // VM runtimes label their boots with the accelerator: KVM and TCG differ tenfold.
    const accel = (await orchestrator.metrics.vmBootDuration.get()).values.find((v) => v.labels.accel !== undefined)?.labels.accel;
    const createLabel = `create-to-ready (cold${accel ? `, ${orchestrator.manager.runtimeName}/${accel}` : ''})`;
    const sandbox = await client.create({ width: 1024, height: 768 });
    const id = sandbox.id;

    const apiShot = await timeIt(N, () => sandbox.screenshot());
    const apiMove = await timeIt(N, (i) => sandbox.mouseMove(100 + (i % 2) * 200, 100 + (i % 2) * 100));

    const sessionDir = path.join(stateDir, id);
    const keyFile = path.join(sessionDir, 'id_ed25519');
    const hostPublicKey = await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKeyPub), 'utf8');
    const guestIp = await guestAddressOf(orchestrator.names, id);
    const direct = await openDirect(stateDir, orchestrator.names, id);
    const guestShot = await timeInGuest(direct, config.display, 'scrot -', N);
    const guestMove = await timeInputInGuest(direct, config.display, INPUT_COMMAND, 'move 300 200\n', N);

    // Every pointer and key action: over the API versus the very same input requests in the guest.
    const perAction: Array<[string, Summary, Summary]> = [];
    for (const input of ACTION_SAMPLES) {
      const api = summarize(await timeIt(N, () => sandbox.action(input)));
      const action = parseAction(input, new Scaler({ width: 1024, height: 768 }, { width: 1024, height: 768 }));
      const plan = isPointerOrKeyAction(action) ? inputPlan(action) : { requests: [] };
      const requests = [...plan.requests, ...(plan.hold?.release ?? [])].map(requestLine).join('');
      const floor = summarize(await timeInputInGuest(direct, config.display, INPUT_COMMAND, requests, N));
      perAction.push([input.action, api, floor]);
    }
    direct.close();

    // A large screen scaled to FWXGA (1366x768) on the host: capture plus scaling over the API.
    const large = await client.create({ width: 1920, height: 1080 });
    const largeDirect = await openDirect(stateDir, orchestrator.names, large.id);
    const largeApi = summarize(await timeIt(N, () => large.screenshot({ scaled: true })));
    const largeFloor = summarize(await timeInGuest(largeDirect, config.display, 'scrot -', N));
    largeDirect.close();
    await large.destroy();

    const ssh = await naiveSsh({ keyFile, hostPublicKey, address: guestIp, workDir: stateDir });
    const naiveN = Math.min(N, 20);
    const naiveShot = await timeIt(naiveN, () => ssh(`DISPLAY=:${config.display} scrot -`), 1);
    const naiveMove = await timeIt(naiveN, (i) => ssh(`DISPLAY=:${config.display} xdotool mousemove ${100 + (i % 2) * 200} 100`), 1);
    await sandbox.destroy();

    const warmMs = await measureWarmCreates(orchestrator.manager, client, CREATES);

    // The load's sessions are made first and measured idle: that is the memory figure.
    const rssBefore = process.memoryUsage.rss();
    const loadSandboxes: Sandbox[] = [];
    for (let i = 0; i < LOAD_SESSIONS; i++) loadSandboxes.push(await client.create({ width: 1024, height: 768 }));
    // Idle as between an agent's steps: used once (capture and input helpers running), then left.
    for (const s of loadSandboxes) await s.screenshot();
    await sleep(3_000);
    const memory = orchestrator.manager.runtimeName === 'container'
      ? await measureIdleMemory(orchestrator.names, loadSandboxes.map((s) => s.id), rssBefore)
      : undefined;
    console.error(`bench: load: ${LOAD_SESSIONS} sessions, a screenshot and a click every ${LOAD_INTERVAL_MS} ms each, for ${LOAD_SECONDS} s`);
    const load = await runLoad(loadSandboxes, LOAD_INTERVAL_MS, LOAD_SECONDS * 1000);
    await Promise.all(loadSandboxes.map((s) => s.destroy()));
    const loadSummary = summarize(load.samples);

    const rows: Array<[string, Summary]> = [
      [createLabel, summarize(createMs)],
      ['create-to-ready (warm pool)', summarize(warmMs)],
      ['screenshot, API', summarize(apiShot)],
      ['screenshot, scrot in guest (floor)', summarize(guestShot)],
      ['screenshot, fresh ssh per command', summarize(naiveShot)],
      ['mouse_move, API', summarize(apiMove)],
      ['mouse_move, sbx-input in guest (floor)', summarize(guestMove)],
      ['mouse_move, fresh ssh per command', summarize(naiveMove)],
      [`load: ${LOAD_SESSIONS} sessions, screenshot or click`, loadSummary],
    ];
    console.log(`\n${'operation'.padEnd(40)} ${'n'.padStart(4)} ${'p50 ms'.padStart(9)} ${'p95 ms'.padStart(9)}`);
    for (const [name, s] of rows) {
      console.log(`${name.padEnd(40)} ${String(s.n).padStart(4)} ${s.p50.toFixed(2).padStart(9)} ${s.p95.toFixed(2).padStart(9)}`);
    }
    const shot = summarize(apiShot).p50;
    const move = summarize(apiMove).p50;
    const results = {
      runtime: orchestrator.manager.runtimeName,
      accelerator: accel ?? null,
      cores: os.cpus().length,
      cold_create_p50_ms: summarize(createMs).p50,
      warm_create_p50_ms: warmMs.length > 0 ? summarize(warmMs).p50 : null,
      warm_create_p95_ms: warmMs.length > 0 ? summarize(warmMs).p95 : null,
      load_sessions: load.sessions,
      load_seconds: LOAD_SECONDS,
      load_interval_ms: LOAD_INTERVAL_MS,
      load_operations: load.samples.length,
      load_errors: load.errors,
      load_p50_ms: loadSummary.p50,
      load_p95_ms: loadSummary.p95,
      load_late_ticks: load.lateTicks,
      idle_session_mib: memory?.perSessionMiB ?? null,
      idle_session_cgroup_mib: memory?.cgroupMiB ?? null,
      idle_session_orchestrator_mib: memory?.orchestratorMiB ?? null,
      idle_session_pss_mib: memory?.pssMiB ?? null,
      screenshot_api_p50_ms: shot,
      screenshot_api_p95_ms: summarize(apiShot).p95,
      screenshot_guest_scrot_p50_ms: summarize(guestShot).p50,
      screenshot_fresh_ssh_p50_ms: summarize(naiveShot).p50,
      screenshot_ratio_vs_guest_scrot: shot / summarize(guestShot).p50,
      mouse_move_api_p50_ms: move,
      mouse_move_api_p95_ms: summarize(apiMove).p95,
      mouse_move_guest_p50_ms: summarize(guestMove).p50,
      mouse_move_fresh_ssh_p50_ms: summarize(naiveMove).p50,
      mouse_move_overhead_ms: move - summarize(guestMove).p50,
      mouse_move_ratio_vs_fresh_ssh: move / summarize(naiveMove).p50,
      actions: Object.fromEntries(
        perAction.map(([name, api, floor]) => [name, { api_p50_ms: api.p50, api_p95_ms: api.p95, guest_p50_ms: floor.p50, guest_p95_ms: floor.p95 }]),
      ),
      screenshot_1080p_scaled_api_p50_ms: largeApi.p50,
      screenshot_1080p_scaled_api_p95_ms: largeApi.p95,
      screenshot_1080p_guest_scrot_p50_ms: largeFloor.p50,
    };
    console.log(`\n${'action (1024x768)'.padEnd(20)} ${'API p50'.padStart(9)} ${'API p95'.padStart(9)} ${'guest p50'.padStart(10)} ${'guest p95'.padStart(10)} ${'overhead'.padStart(9)}`);
    for (const [name, api, floor] of perAction) {
      console.log(
        `${name.padEnd(20)} ${api.p50.toFixed(2).padStart(9)} ${api.p95.toFixed(2).padStart(9)} ${floor.p50.toFixed(2).padStart(10)} ${floor.p95.toFixed(2).padStart(10)} ${(api.p50 - floor.p50).toFixed(2).padStart(9)}`,
      );
    }
    console.log(
      `\nscreenshot 1920x1080 scaled to 1366x768: API p50 ${largeApi.p50.toFixed(2)} ms (p95 ${largeApi.p95.toFixed(2)}), ` +
        `scrot in guest p50 ${largeFloor.p50.toFixed(2)} ms, ratio ${(largeApi.p50 / largeFloor.p50).toFixed(2)}`,
    );
    console.log(
      `\nscreenshot: API/guest scrot = ${results.screenshot_ratio_vs_guest_scrot.toFixed(2)}, ` +
        `API/fresh ssh = ${(shot / results.screenshot_fresh_ssh_p50_ms).toFixed(3)}`,
    );
    console.log(
      `mouse_move: API - guest = ${results.mouse_move_overhead_ms.toFixed(2)} ms, ` +
        `API/fresh ssh = ${results.mouse_move_ratio_vs_fresh_ssh.toFixed(3)}`,
    );
    if (memory) {
      console.log(
        `idle session: ${memory.perSessionMiB.toFixed(1)} MiB (container cgroup ${memory.cgroupMiB.toFixed(1)} + orchestrator ` +
          `${memory.orchestratorMiB.toFixed(1)}; PSS of its processes ${memory.pssMiB.toFixed(1)}), over ${memory.sessions} sessions`,
      );
    }
    console.log(
      `load: ${load.sessions} sessions x ${LOAD_SECONDS} s: ${load.samples.length} operations, ${load.errors} errors, ` +
        `p50 ${loadSummary.p50.toFixed(1)} ms, p95 ${loadSummary.p95.toFixed(1)} ms, ${load.lateTicks} ticks started late`,
    );
    const goals = goalRows(results, LOAD_INTERVAL_MS);
    printGoals(goals, results.cores);
    await writeFile('bench-results.json', JSON.stringify(results, null, 2) + '\n');
    await writeChart('bench-chart.png', `Sandbox Orchestrator bench: ${results.runtime}, ${results.cores} cores, 1024x768`, goals);
    console.error('bench: wrote bench-results.json and bench-chart.png');
  } finally {
    await orchestrator.close();
    await rm(stateDir, { recursive: true, force: true });
  }
}

/** Harmless samples of each pointer and key action (clicks land on the empty desktop). */
const ACTION_SAMPLES: ComputerToolInput[] = [
  { action: 'mouse_move', coordinate: [500, 300] },
  { action: 'left_click', coordinate: [900, 700] },
  { action: 'right_click', coordinate: [900, 700] },
  { action: 'double_click', coordinate: [900, 700] },
  { action: 'scroll', scroll_direction: 'down', scroll_amount: 1, coordinate: [900, 700] },
  { action: 'key', text: 'shift' },
  { action: 'left_mouse_down' },
  { action: 'left_mouse_up' },
];

/** A connection of the benchmark's own to a guest, from the files the orchestrator wrote. */
async function openDirect(stateDir: string, names: ResourceNames, id: string): Promise<GuestConnection> {
  const sessionDir = path.join(stateDir, id);
  const hostPublicKey = await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKeyPub), 'utf8');
  const direct = new GuestConnection({
    endpoint: { host: await guestAddressOf(names, id), port: 22 },
    username: GUEST_USER,
    privateKey: await readFile(path.join(sessionDir, 'id_ed25519'), 'utf8'),
    pinnedHostKey: publicKeyBlob(hostPublicKey.trim()),
  });
  await direct.open(10_000);
  return direct;
}

main().catch((err: unknown) => {
  console.error(`bench: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
