import type { ChartRow } from './chart.js';

/**
 * Screenshot formats the bench measures, each at its default quality (jpeg 80, webp
 * lossless): each is measured (static, changing, scaled, CPU) and gets its own rows in the
 * table, the JSON and the chart. The goals compare the API with the same work in the guest:
 * scrot writes a PNG, so PNG (the default) is what they are about. JPEG and WebP rows are
 * shown against PNG's goals for reference: their encoders alone (libjpeg-turbo, libwebp) take
 * ~10 ms of CPU for a 1024x768 screen, half of scrot's whole capture-and-PNG, so a changing
 * screen's CPU ratio cannot reach 0.5 whatever the capture costs (docs/benchmarks.md).
 */
export const SCREENSHOT_FORMATS = ['png', 'jpeg', 'webp'] as const;
export type ScreenshotFormat = (typeof SCREENSHOT_FORMATS)[number];

/** One format's screenshot figures (see screenshots.ts). */
export interface ScreenshotFigures {
  static_ratio_vs_scrot: number;
  changing_ratio_vs_scrot: number;
  scaled_1080p_ratio_vs_scrot: number;
  changing_cpu_ratio_vs_scrot: number;
}

/** The figures bench-results.json must carry for the goal tables, and each one's goal. */
export interface GoalFigures {
  screenshots: Record<ScreenshotFormat, ScreenshotFigures>;
  /** API p50 per click action, in ms. */
  click_p50_ms: Record<'left_click' | 'right_click' | 'middle_click' | 'double_click' | 'triple_click', number>;
  load_errors: number;
  load_p95_ms: number;
  load_late_ticks_percent: number;
  load_event_loop_p99_ms: number;
  ramp_max_sessions: number | null;
  idle_session_mib: number | null;
  mouse_move_overhead_ms: number;
  mouse_move_ratio_vs_fresh_ssh: number;
  warm_create_p50_ms: number | null;
  cold_create_p50_ms: number;
  /** Recording a 1024x768 session at 5 fps on a screen changing every frame (the worst case): its CPU, % of one core... */
  recording_cpu_core_percent: number;
  /** ... and how much slower that session's screenshots are while it is recorded (p50, %). */
  recording_screenshot_latency_increase_percent: number;
  /** Issue 16: wall time per step of the built-in loop minus a direct tool call (zero-latency model). */
  run_loop_overhead_ms: number;
  /** Issue 22: place() + confirm() a second on a real PostgreSQL with 1,000 simulated nodes (null: no PostgreSQL here). */
  placement_tx_creates_per_second: number | null;
  /** Issue 22: screenshot p50 through a gateway / straight from the node (same session, interleaved). */
  gateway_screenshot_ratio: number | null;
  /** Issue 22: an action's p50 through a gateway - straight from the node, ms. */
  gateway_action_added_ms: number | null;
  /** Issue 22: live-view frames through a gateway / straight, over the same seconds. */
  gateway_live_view_frames_ratio: number | null;
  /** Issue 22: fullest node / ideal in the 10,000-session, 1,000-node placement simulation (the worst seed). */
  placement_simulation_fullest_vs_ideal: number | null;
  /** Issue 24: a small GET to a guest port through the orchestrator, p50 minus the same request in the guest, ms (null: not measured). */
  guest_port_http_added_ms: number | null;
  /** Issue 24: a download through a guest port / the same file over SFTP (throughput ratio). */
  guest_port_download_ratio_vs_sftp: number | null;
  /** Issue 24: page.evaluate('1') over CDP through the orchestrator, p50 ms (null: no Chromium in the desktop image). */
  cdp_evaluate_p50_ms: number | null;
  /** Issue 24: POST .../processes {argv: [echo]} to its first output byte over SSE, p50 ms. */
  process_start_first_byte_p50_ms: number;
  /** Issue 25: memory pause and resume of a 1024x768 session over the API, p50 ms (null: the runtime cannot pause here). */
  pause_memory_p50_ms: number | null;
  resume_memory_p50_ms: number | null;
  /** Issue 14, per template: create-to-ready p50 cold and from its warm pool, idle session memory. */
  templates: Record<string, { cold_create_p50_ms: number; warm_create_p50_ms: number | null; idle_session_mib: number | null }>;
}

/** The goal table of issue 13, then the earlier one (issue 6) for the figures it kept. */
export function goalRows(f: GoalFigures): ChartRow[] {
  const rows: ChartRow[] = [];
  for (const format of SCREENSHOT_FORMATS) {
    const s = f.screenshots[format];
    const reference = format !== 'png';
    rows.push(
      { label: `screenshot ${format} API / scrot, static`, value: s.static_ratio_vs_scrot, goal: 0.3, unit: 'x', reference },
      { label: `screenshot ${format} API / scrot, changing`, value: s.changing_ratio_vs_scrot, goal: 0.35, unit: 'x', reference },
      { label: `screenshot ${format} 1080p->1366x768 / scrot`, value: s.scaled_1080p_ratio_vs_scrot, goal: 0.35, unit: 'x', reference },
      { label: `CPU per screenshot ${format} / scrot, changing`, value: s.changing_cpu_ratio_vs_scrot, goal: 0.5, unit: 'x', reference },
    );
  }
  for (const click of ['left_click', 'right_click', 'middle_click'] as const) {
    rows.push({ label: `${click} API p50`, value: f.click_p50_ms[click], goal: 15, unit: 'ms' });
  }
  for (const click of ['double_click', 'triple_click'] as const) {
    rows.push({ label: `${click} API p50`, value: f.click_p50_ms[click], goal: 30, unit: 'ms' });
  }
  rows.push(
    { label: 'load 16 sessions: errors', value: f.load_errors, goal: 0, unit: '' },
    { label: 'load 16 sessions: p95', value: f.load_p95_ms, goal: 120, unit: 'ms' },
    { label: 'load 16 sessions: late ticks', value: f.load_late_ticks_percent, goal: 2, unit: '%' },
    { label: 'most sessions, 0 errors, p95 <= 250 ms', value: f.ramp_max_sessions, goal: 64, unit: '', better: 'higher' },
    { label: 'event-loop delay p99 under the load', value: f.load_event_loop_p99_ms, goal: 10, unit: 'ms' },
    { label: 'host memory per idle session', value: f.idle_session_mib, goal: 40, unit: 'MiB' },
    // Issue 15's recording goals.
    { label: 'CPU per recorded session, 5 fps, changing', value: f.recording_cpu_core_percent, goal: 10, unit: '%' },
    { label: 'screenshot latency while recorded, changing', value: f.recording_screenshot_latency_increase_percent, goal: 10, unit: '%' },
    // Issue 6's goals, kept.
    { label: 'mouse_move API - sbx-input in guest', value: f.mouse_move_overhead_ms, goal: 5, unit: 'ms' },
    { label: 'mouse_move API / fresh ssh', value: f.mouse_move_ratio_vs_fresh_ssh, goal: 0.05, unit: 'x' },
    { label: 'create-to-ready p50, warm pool', value: f.warm_create_p50_ms, goal: 150, unit: 'ms' },
    { label: 'create-to-ready p50, cold', value: f.cold_create_p50_ms, goal: 1500, unit: 'ms' },
    // Issue 14's goals, per template (an idle desktop session: at most 250 MiB).
    ...Object.entries(f.templates).flatMap(([name, t]): ChartRow[] => [
      { label: `create-to-ready p50, cold, ${name}`, value: t.cold_create_p50_ms, goal: 2000, unit: 'ms' },
      { label: `create-to-ready p50, warm pool, ${name}`, value: t.warm_create_p50_ms, goal: 150, unit: 'ms' },
      ...(name === 'desktop' ? [{ label: 'host memory per idle desktop session', value: t.idle_session_mib, goal: 250, unit: 'MiB' }] : []),
    ]),
    // Issue 16's goal.
    { label: 'run loop per step - direct tool call', value: f.run_loop_overhead_ms, goal: 5, unit: 'ms' },
    // Issue 22's goals.
    { label: 'creates/s, placement transaction (PostgreSQL)', value: f.placement_tx_creates_per_second, goal: 500, unit: '/s', better: 'higher' },
    { label: 'screenshot via gateway / straight, p50', value: f.gateway_screenshot_ratio, goal: 1.1, unit: 'x' },
    { label: 'gateway added latency on an action, p50', value: f.gateway_action_added_ms, goal: 1, unit: 'ms' },
    { label: 'live-view frames via gateway / straight', value: f.gateway_live_view_frames_ratio, goal: 0.95, unit: 'x', better: 'higher' },
    { label: 'fullest node / ideal, 10k/1k simulation', value: f.placement_simulation_fullest_vs_ideal, goal: 1.15, unit: 'x' },
    // Issue 24's goals.
    { label: 'process start to first output byte, p50', value: f.process_start_first_byte_p50_ms, goal: 15, unit: 'ms' },
    // Issue 25's goals.
    { label: 'pause (memory) p50', value: f.pause_memory_p50_ms, goal: 50, unit: 'ms' },
    { label: 'resume (memory) p50', value: f.resume_memory_p50_ms, goal: 50, unit: 'ms' },
    { label: 'guest port GET p50 - same GET in guest', value: f.guest_port_http_added_ms, goal: 2, unit: 'ms' },
    { label: 'download via guest port / SFTP', value: f.guest_port_download_ratio_vs_sftp, goal: 0.8, unit: 'x', better: 'higher' },
    { label: "CDP page.evaluate('1') p50", value: f.cdp_evaluate_p50_ms, goal: 3, unit: 'ms' },
  );
  return rows;
}

/** Whether a measured row meets its goal (null when not measured). */
export function goalMet(row: ChartRow): boolean | null {
  if (row.value === null || !Number.isFinite(row.value) || row.reference) return null;
  return row.better === 'higher' ? row.value >= row.goal : row.value <= row.goal;
}

/** The table printed at the end: figure, value, goal, met or not. */
export function printGoals(rows: ChartRow[], cores: number): void {
  console.log(`\n${'figure (goal tables of issues 13 and 6)'.padEnd(44)} ${'value'.padStart(10)} ${'goal'.padStart(8)}  met`);
  for (const row of rows) {
    const met = goalMet(row);
    const measured = row.value !== null && Number.isFinite(row.value);
    const value = measured ? (row.value as number).toFixed((row.value as number) >= 100 ? 0 : 3) : 'n/a';
    const goal = `${row.better === 'higher' ? '>=' : '<='}${row.goal}`;
    console.log(
      `${row.label.padEnd(44)} ${`${value} ${row.unit}`.padStart(10)} ${goal.padStart(8)}  ${row.reference ? 'ref' : met === null ? '-' : met ? 'yes' : 'no'}`,
    );
  }
  console.log(`(${cores} cores)`);
}
