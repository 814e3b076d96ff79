import type { ChartRow } from './chart.js';

/** The figures bench-results.json must carry (the issue's list), and each one's goal. */
export interface GoalFigures {
  screenshot_ratio_vs_guest_scrot: number;
  mouse_move_overhead_ms: number;
  mouse_move_ratio_vs_fresh_ssh: number;
  warm_create_p50_ms: number | null;
  cold_create_p50_ms: number;
  load_errors: number;
  load_p95_ms: number;
  idle_session_mib: number | null;
  cores: number;
}

/** The issue's table as chart rows (load p95 has no goal: it is drawn against the 250 ms tick). */
export function goalRows(f: GoalFigures, loadIntervalMs: number): ChartRow[] {
  return [
    { label: 'screenshot API / scrot in guest', value: f.screenshot_ratio_vs_guest_scrot, goal: 0.5, unit: 'x' },
    { label: 'mouse_move API - sbx-input in guest', value: f.mouse_move_overhead_ms, goal: 5, unit: 'ms' },
    { label: 'mouse_move API / fresh ssh', value: f.mouse_move_ratio_vs_fresh_ssh, goal: 0.05, unit: 'x' },
    { label: 'create-to-ready p50, warm pool', value: f.warm_create_p50_ms, goal: 150, unit: 'ms' },
    { label: 'create-to-ready p50, cold', value: f.cold_create_p50_ms, goal: 1500, unit: 'ms' },
    { label: 'load: errors', value: f.load_errors, goal: 0, unit: '' },
    { label: 'load: p95 of an operation', value: f.load_p95_ms, goal: loadIntervalMs, unit: 'ms', goalName: 'tick' },
    { label: 'host memory per idle session', value: f.idle_session_mib, goal: 120, unit: 'MiB' },
  ];
}

/** The table printed at the end: figure, value, goal, met or not. */
export function printGoals(rows: ChartRow[], cores: number): void {
  console.log(`\n${'figure (goal table of issue 6)'.padEnd(42)} ${'value'.padStart(10)} ${'goal'.padStart(8)}  met`);
  for (const row of rows) {
    const measured = row.value !== null && Number.isFinite(row.value);
    const value = measured ? (row.value as number).toFixed((row.value as number) >= 100 ? 0 : 3) : 'n/a';
    const met = !measured || row.goalName ? '-' : (row.value as number) <= row.goal ? 'yes' : 'no';
    console.log(`${row.label.padEnd(42)} ${`${value} ${row.unit}`.padStart(10)} ${`${row.goalName ? `${row.goalName} ` : ''}${row.goal}`.padStart(8)}  ${met}`);
  }
  console.log(`(${cores} cores)`);
}
