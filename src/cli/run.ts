import { Command, InvalidArgumentError } from 'commander';
import type { SandboxClient } from '../client/index.js';
import { openLiveView } from '../client/live-view.js';
import type { RunEvent } from '../client/runs.js';

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('a positive integer');
  return n;
}

/** One line per event, as the run goes (tool inputs and results cut: the trajectory keeps them whole). */
export function describeEvent(event: RunEvent): string {
  switch (event.type) {
    case 'text':
      return `[${event.step}] ${event.text}`;
    case 'tool_call':
      return `[${event.step}] -> ${event.name} ${JSON.stringify(event.input).slice(0, 200)}`;
    case 'tool_result':
      return `[${event.step}] <- ${event.isError ? 'error: ' : ''}${event.summary.slice(0, 200)}${event.images ? ` (${event.images} image${event.images > 1 ? 's' : ''})` : ''}`;
    case 'usage':
      return `[${event.step}] tokens: ${event.usage.inputTokens} in, ${event.usage.outputTokens} out, ${event.usage.cacheReadInputTokens} from cache`;
    case 'end':
      return `run ${event.state}: ${event.stopReason} after ${event.steps} steps${event.error ? ` (${event.error})` : ''}`;
  }
}

/** `sbx run "task"`: a task for the built-in Claude loop, its progress printed as it goes. */
export function runCommand(client: () => SandboxClient): Command {
  return new Command('run')
    .description('run a task with Claude on a new sandbox (or --session), printing its progress')
    .argument('<task>', 'what to do, in words')
    .option('--session <id>', 'an existing sandbox to use')
    .option('--model <name>', 'the Claude model')
    .option('--max-steps <n>', 'stop after this many model calls', positive)
    .action(async (task: string, opts: { session?: string; model?: string; maxSteps?: number }) => {
      const sbx = client();
      const run = await sbx.runs.create({ task, sessionId: opts.session, model: opts.model, maxSteps: opts.maxSteps });
      console.log(`run ${run.id} on session ${run.sessionId}`);
      // A view-only link to watch it: the server drops a view link's input, so sharing it is safe.
      const live = await openLiveView(sbx, run.sessionId, { mode: 'view' }).catch((err: unknown) => err as Error);
      console.log(live instanceof Error ? `(no live view: ${live.message})` : `watch it live: ${live.url}`);
      let stop = false;
      process.once('SIGINT', () => {
        if (stop) process.exit(130);
        stop = true;
        console.error('stopping the run (Ctrl-C again to leave it running)');
        void sbx.runs.cancel(run.id).catch(() => undefined);
      });
      let failed = false;
      for await (const event of sbx.runs.events(run.id)) {
        console.log(describeEvent(event));
        if (event.type === 'end') failed = event.state === 'failed';
      }
      process.exitCode = failed ? 1 : 0;
    });
}
