import { Command } from 'commander';
import type { SandboxClient, Trajectory, TrajectoryStep } from '../client/index.js';
import { createTrajectoryLink, fetchTrajectory } from '../client/trajectory.js';

/**
 * `sbx trajectory <id>`: what a session did, one line per call (`--json`: the API's JSON;
 * `--link`: a URL of the viewer page to open in a browser).
 */
export function trajectoryCommand(client: () => SandboxClient): Command {
  return new Command('trajectory')
    .argument('<id>', 'the session')
    .description('every action and tool call of a session, in order, with timings and results (also after it ended)')
    .option('--json', 'print the trajectory as JSON')
    .option('--link', 'print a link to the viewer page instead (valid for an hour)')
    .action(async (id: string, opts: { json?: boolean; link?: boolean }) => {
      if (opts.link) {
        console.log((await createTrajectoryLink(client(), id)).url);
        return;
      }
      // Not through connect(): the trajectory outlives the session's record.
      const trajectory = await fetchTrajectory(client(), id);
      console.log(opts.json ? JSON.stringify(trajectory, null, 2) : formatTrajectory(trajectory));
    });
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}

/** A readable step list: a header line of totals, then one line per step (an error on its own line below it). */
export function formatTrajectory(t: Trajectory): string {
  const state = t.endReason ? `${t.state}: ${t.endReason}` : t.state;
  const dropped = t.totals.droppedSteps > 0 ? ` (+${t.totals.droppedSteps} not stored)` : '';
  const lines = [
    `session ${t.sessionId} (${state}), started ${t.startedAt}: ${t.totals.steps} steps${dropped}, ` +
      `${t.totals.errors} error${t.totals.errors === 1 ? '' : 's'}, ${seconds(t.totals.busyMs)} in calls`,
  ];
  for (const step of t.steps) {
    const timing = `${Math.round(step.durationMs)} ms${step.settleMs !== null ? `, settled ${Math.round(step.settleMs)} ms` : ''}`;
    lines.push(
      `${`#${step.n}`.padStart(5)}  ${`+${seconds(step.startedMs)}`.padStart(10)}  ${step.tool.padEnd(8).slice(0, 8)}  ${describe(step).padEnd(48)}  ${timing}`,
    );
    if (step.error) lines.push(`${' '.repeat(19)}✗ ${step.error.code}: ${oneLine(step.error.message)}`);
    else if (step.output) lines.push(`${' '.repeat(19)}→ ${oneLine(step.output)}`);
  }
  return lines.join('\n');
}

function describe(step: TrajectoryStep): string {
  const input = step.input;
  if (step.tool === 'bash') return oneLine(input.restart === true ? 'restart' : asText(input.command));
  if (step.tool === 'str_replace_based_edit_tool') return oneLine(`${step.action ?? '?'} ${asText(input.path)}`);
  const at = Array.isArray(input.coordinate) ? ` (${input.coordinate.join(', ')})` : '';
  const typed =
    typeof input.textLength === 'number' ? ` (${input.textLength} characters)` : typeof input.text === 'string' ? ` ${JSON.stringify(input.text)}` : '';
  return oneLine(`${step.action ?? '?'}${at}${typed}`);
}

/** A tool input's field as text: a string as it is, anything else as JSON. */
function asText(value: unknown): string {
  return typeof value === 'string' ? value : value === undefined ? '' : JSON.stringify(value);
}

function oneLine(text: string, max = 100): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
