import type { ActionFigures } from './actions.js';
import type { GoalFigures, ScreenshotFormat } from './goals.js';
import { SCREENSHOT_FORMATS } from './goals.js';
import type { IdleMemory } from './idle-memory.js';
import type { LoadResult } from './load.js';
import type { RampResult } from './ramp.js';
import type { RecordingCost } from './recording.js';
import type { LoopOverhead } from './run-loop.js';
import { describeProcessStart, type ProcessStartFigures } from './processes.js';
import type { ScreenshotComparison } from './screenshots.js';
import type { Summary } from './stats.js';
import type { PauseFigures } from './pause.js';
import type { TemplateFigures } from './templates.js';
import { describePlacementTx, type PlacementTxFigures } from './placement-tx.js';
import { describeGateway, type GatewayFigures } from './gateway.js';
import { describeGuestPorts, type GuestPortFigures } from './guest-ports.js';
import { describeSimulation, type SimulationFigures } from './placement-simulation.js';
import type { TransportFigures } from './transports.js';

export interface Measured {
  runtime: string;
  accelerator: string | null;
  cores: number;
  create: Summary;
  warm: Summary | null;
  screenshots: Record<ScreenshotFormat, { static: ScreenshotComparison; changing: ScreenshotComparison }>;
  scaled: Record<ScreenshotFormat, ScreenshotComparison>;
  mouseMove: { api: Summary; guest: Summary; freshSsh: Summary };
  screenshotFreshSsh: Summary;
  actions: Record<string, ActionFigures>;
  load: LoadResult;
  loadSeconds: number;
  loadIntervalMs: number;
  ramp: RampResult;
  memory: IdleMemory | null;
  recording: { static: RecordingCost; changing: RecordingCost };
  loop: LoopOverhead;
  processStart: ProcessStartFigures;
  templates: TemplateFigures[];
  placementTx: PlacementTxFigures | null;
  gateway: GatewayFigures | null;
  /** Issue 24 (null: not measured). */
  ports: GuestPortFigures | null;
  /** One run per seed. */
  simulation: SimulationFigures[];
  pause: PauseFigures | null;
  /** Issue 23: containers over TCP and over a Unix socket, side by side. */
  transports: TransportFigures[];
}

export type Results = ReturnType<typeof buildResults>;

/** bench-results.json: every figure, flat where the goal table reads it. */
export function buildResults(m: Measured) {
  const clickP50 = (name: string) => m.actions[name]?.api.p50 ?? Number.NaN;
  const png = m.screenshots.png;
  const figures: GoalFigures = {
    screenshots: Object.fromEntries(
      SCREENSHOT_FORMATS.map((f) => [
        f,
        {
          static_ratio_vs_scrot: m.screenshots[f].static.ratio,
          changing_ratio_vs_scrot: m.screenshots[f].changing.ratio,
          scaled_1080p_ratio_vs_scrot: m.scaled[f].ratio,
          changing_cpu_ratio_vs_scrot: m.screenshots[f].changing.cpuRatio,
        },
      ]),
    ) as GoalFigures['screenshots'],
    click_p50_ms: {
      left_click: clickP50('left_click'),
      right_click: clickP50('right_click'),
      middle_click: clickP50('middle_click'),
      double_click: clickP50('double_click'),
      triple_click: clickP50('triple_click'),
    },
    load_errors: m.load.errors,
    load_p95_ms: m.load.p95Ms,
    load_late_ticks_percent: m.load.lateTicksPercent,
    load_event_loop_p99_ms: m.load.eventLoopP99Ms,
    ramp_max_sessions: m.ramp.maxSessions,
    idle_session_mib: m.memory?.perSessionMiB ?? null,
    mouse_move_overhead_ms: m.mouseMove.api.p50 - m.mouseMove.guest.p50,
    mouse_move_ratio_vs_fresh_ssh: m.mouseMove.api.p50 / m.mouseMove.freshSsh.p50,
    warm_create_p50_ms: m.warm?.p50 ?? null,
    cold_create_p50_ms: m.create.p50,
    recording_cpu_core_percent: m.recording.changing.cpuCoreFraction * 100,
    recording_screenshot_latency_increase_percent: m.recording.changing.latencyIncreasePercent,
    run_loop_overhead_ms: m.loop.loopPerStepMs - m.loop.directMeanMs,
    process_start_first_byte_p50_ms: m.processStart.api.p50,
    placement_tx_creates_per_second: m.placementTx?.createsPerSecond ?? null,
    gateway_screenshot_ratio: m.gateway?.screenshot.ratio ?? null,
    gateway_action_added_ms: m.gateway?.action.addedMs ?? null,
    gateway_live_view_frames_ratio: m.gateway?.liveView.ratio ?? null,
    pause_memory_p50_ms: m.pause?.pause.p50 ?? null,
    resume_memory_p50_ms: m.pause?.resume.p50 ?? null,
    guest_port_http_added_ms: m.ports?.http.addedP50Ms ?? null,
    guest_port_download_ratio_vs_sftp: m.ports?.download.ratio ?? null,
    cdp_evaluate_p50_ms: m.ports?.cdpEvaluateP50Ms ?? null,
    placement_simulation_fullest_vs_ideal: m.simulation.length > 0 ? Math.max(...m.simulation.map((s) => s.dominant)) : null,
    templates: Object.fromEntries(
      m.templates.map((t) => [t.template, { cold_create_p50_ms: t.cold.p50, warm_create_p50_ms: t.warm?.p50 ?? null, idle_session_mib: t.idleMiB }]),
    ),
  };
  return {
    ...figures,
    runtime: m.runtime,
    accelerator: m.accelerator,
    cores: m.cores,
    cold_create_p95_ms: m.create.p95,
    recording_detail: m.recording,
    run_loop_detail: m.loop,
    process_start_detail: m.processStart,
    placement_tx_detail: m.placementTx,
    gateway_detail: m.gateway,
    ports_detail: m.ports,
    placement_simulation_detail: m.simulation,
    templates_detail: m.templates,
    warm_create_p95_ms: m.warm?.p95 ?? null,
    pause_detail: m.pause,
    transports_detail: m.transports,
    // Kept under their earlier names (PNG, static screen) for comparison with older runs.
    screenshot_api_p50_ms: png.static.api.p50,
    screenshot_api_p95_ms: png.static.api.p95,
    screenshot_guest_scrot_p50_ms: png.static.scrot.p50,
    screenshot_ratio_vs_guest_scrot: png.static.ratio,
    screenshot_fresh_ssh_p50_ms: m.screenshotFreshSsh.p50,
    screenshot_1080p_scaled_api_p50_ms: m.scaled.png.api.p50,
    screenshot_1080p_scaled_api_p95_ms: m.scaled.png.api.p95,
    screenshot_1080p_guest_scrot_p50_ms: m.scaled.png.scrot.p50,
    screenshot_detail: { screen_1024x768: m.screenshots, scaled_1920x1080_to_1366x768: m.scaled },
    mouse_move_api_p50_ms: m.mouseMove.api.p50,
    mouse_move_api_p95_ms: m.mouseMove.api.p95,
    mouse_move_guest_p50_ms: m.mouseMove.guest.p50,
    mouse_move_fresh_ssh_p50_ms: m.mouseMove.freshSsh.p50,
    actions: Object.fromEntries(
      Object.entries(m.actions).map(([name, a]) => [
        name,
        { api_p50_ms: a.api.p50, api_p95_ms: a.api.p95, guest_p50_ms: a.guest.p50, guest_p95_ms: a.guest.p95 },
      ]),
    ),
    load_sessions: m.load.sessions,
    load_seconds: m.loadSeconds,
    load_interval_ms: m.loadIntervalMs,
    load_operations: m.load.operations,
    load_first_error: m.load.firstError,
    load_p50_ms: m.load.p50Ms,
    load_ticks: m.load.ticks,
    load_late_ticks: m.load.lateTicks,
    load_event_loop_max_ms: m.load.eventLoopMaxMs,
    load_event_loop_tick_p99_ms: m.load.eventLoopTickP99Ms,
    ramp: m.ramp,
    idle_session_cgroup_mib: m.memory?.cgroupMiB ?? null,
    idle_session_orchestrator_mib: m.memory?.orchestratorMiB ?? null,
    idle_session_pss_mib: m.memory?.pssMiB ?? null,
    idle_session_processes_pss_mib: m.memory?.processes ?? null,
  };
}

const ms = (v: number) => v.toFixed(2).padStart(9);

/** The tables printed before the goal table. */
export function printReport(r: Results): void {
  console.log(
    `\n${'screenshot (API vs scrot in guest)'.padEnd(44)} ${'API p50'.padStart(9)} ${'scrot p50'.padStart(9)} ${'ratio'.padStart(6)} ${'API CPU'.padStart(9)} ${'scrot CPU'.padStart(9)}`,
  );
  const detail = r.screenshot_detail;
  for (const format of SCREENSHOT_FORMATS) {
    const rows: Array<[string, ScreenshotComparison]> = [
      [`${format} 1024x768, static`, detail.screen_1024x768[format].static],
      [`${format} 1024x768, changing every frame`, detail.screen_1024x768[format].changing],
      [`${format} 1920x1080 -> 1366x768, static`, detail.scaled_1920x1080_to_1366x768[format]],
    ];
    for (const [name, c] of rows) {
      console.log(
        `${name.padEnd(44)} ${ms(c.api.p50)} ${ms(c.scrot.p50)} ${c.ratio.toFixed(2).padStart(6)} ` +
          `${(c.apiCpuSeconds * 1000).toFixed(1).padStart(7)}ms ${(c.scrotCpuSeconds * 1000).toFixed(1).padStart(7)}ms`,
      );
    }
  }
  console.log('(API CPU: orchestrator process (the bench client runs in a child process, not counted) + sbx-capture + its sshd; scrot CPU: its own rusage)');

  console.log(`\n${'action (1024x768)'.padEnd(20)} ${'API p50'.padStart(9)} ${'API p95'.padStart(9)} ${'guest p50'.padStart(10)} ${'guest p95'.padStart(10)}`);
  for (const [name, a] of Object.entries(r.actions)) {
    console.log(
      `${name.padEnd(20)} ${ms(a.api_p50_ms)} ${ms(a.api_p95_ms)} ${a.guest_p50_ms.toFixed(2).padStart(10)} ${a.guest_p95_ms.toFixed(2).padStart(10)}`,
    );
  }
  console.log(
    `\nmouse_move: API p50 ${r.mouse_move_api_p50_ms.toFixed(2)} ms, in guest ${r.mouse_move_guest_p50_ms.toFixed(2)} ms, ` +
      `fresh ssh ${r.mouse_move_fresh_ssh_p50_ms.toFixed(1)} ms; screenshot with a fresh ssh ${r.screenshot_fresh_ssh_p50_ms.toFixed(1)} ms`,
  );
  console.log(
    `create to ready: cold p50 ${r.cold_create_p50_ms.toFixed(0)} ms (p95 ${r.cold_create_p95_ms.toFixed(0)}), ` +
      `warm pool ${r.warm_create_p50_ms === null ? 'n/a' : `${r.warm_create_p50_ms.toFixed(0)} ms (p95 ${r.warm_create_p95_ms?.toFixed(0)})`}`,
  );
  if (r.idle_session_mib !== null) {
    console.log(
      `idle session: ${r.idle_session_mib.toFixed(1)} MiB (container cgroup ${r.idle_session_cgroup_mib?.toFixed(1)} + orchestrator ` +
        `${r.idle_session_orchestrator_mib?.toFixed(1)}; PSS of its processes ${r.idle_session_pss_mib?.toFixed(1)}: ` +
        `${(r.idle_session_processes_pss_mib ?? []).map((p) => `${p.name} ${p.pssMiB.toFixed(1)}`).join(', ')})`,
    );
  }
  console.log(
    `load: ${r.load_sessions} sessions x ${r.load_seconds} s: ${r.load_operations} operations, ${r.load_errors} errors` +
      `${r.load_first_error ? ` (first: ${r.load_first_error})` : ''}, p50 ${r.load_p50_ms.toFixed(1)} ms, p95 ${r.load_p95_ms.toFixed(1)} ms, ` +
      `${r.load_late_ticks} of ${r.load_ticks} ticks late (${r.load_late_ticks_percent.toFixed(1)}%), ` +
      `event-loop delay p99 ${r.load_event_loop_p99_ms.toFixed(1)} ms (max ${r.load_event_loop_max_ms.toFixed(1)}; between ticks of its 10 ms timer ${r.load_event_loop_tick_p99_ms.toFixed(1)})`,
  );
  for (const screen of ['static', 'changing'] as const) {
    const c = r.recording_detail[screen];
    console.log(
      `recording at 5 fps, ${screen} screen: ${(c.cpuCoreFraction * 100).toFixed(1)}% of a core (ffmpeg ${(c.ffmpegCoreFraction * 100).toFixed(1)}%, ` +
        `guest capture ${(c.guestCoreFraction * 100).toFixed(1)}%); screenshot p50 ${c.screenshotsAlone.p50.toFixed(1)} -> ${c.screenshotsRecorded.p50.toFixed(1)} ms ` +
        `(${c.latencyIncreasePercent >= 0 ? '+' : ''}${c.latencyIncreasePercent.toFixed(1)}%)`,
    );
  }
  console.log(describeProcessStart(r.process_start_detail));
  if (r.placement_tx_detail) console.log(describePlacementTx(r.placement_tx_detail));
  if (r.gateway_detail) console.log(describeGateway(r.gateway_detail));
  if (r.ports_detail) console.log(describeGuestPorts(r.ports_detail));
  for (const run of r.placement_simulation_detail) console.log(describeSimulation(run));
  console.log(
    `ramp: ${r.ramp.steps.map((s) => `${s.sessions}: ${s.errors} errors, p95 ${s.p95Ms.toFixed(0)} ms ${s.passed ? 'ok' : 'FAIL'}`).join('; ')}; ` +
      `most sessions ${r.ramp.maxSessions} (stopped by ${r.ramp.stoppedBy}${r.ramp.createError ? `: ${r.ramp.createError}` : ''})`,
  );
}
