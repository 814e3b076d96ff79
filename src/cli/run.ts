import { Command, InvalidArgumentError } from 'commander';
import type { SandboxClient } from '../client/index.js';
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
      // TODO(issue 15 live view): print the live-view URL here once client.liveView exists
      // (another engineer adds it); until then the trajectory page is the way to watch.
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
