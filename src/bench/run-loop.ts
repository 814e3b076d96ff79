import { createServer } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Sandbox, SandboxClient } from '../client/index.js';
import { summarize, type Summary } from './stats.js';

export interface LoopOverhead {
  /** One screenshot tool call over POST /tools/computer, as a client's own loop makes it. */
  direct: Summary;
  directMeanMs: number;
  /** Wall time of a run of the built-in loop per step (a step: one model call and one screenshot tool call). */
  loopPerStepMs: number;
  steps: number;
}

/**
 * A Messages API stand-in with zero latency for the bench: every request is answered at once
 * with one `screenshot` tool_use (the run ends on its maxSteps). What a step then costs
 * beyond the tool call is the loop's own work: the SDK's request (the history with its images,
 * as JSON over loopback), the history's upkeep, events.
 */
export async function startZeroLatencyModel(): Promise<{ url: string; close: () => Promise<void> }> {
  let n = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      n++;
      const content = [{ type: 'tool_use', id: `tu_${n}`, name: 'computer', input: { action: 'screenshot' } }];
      const body = JSON.stringify({
        id: `msg_${n}`,
        type: 'message',
        role: 'assistant',
        model: 'bench',
        content,
        stop_reason: 'tool_use',
        stop_sequence: null,
        usage: { input_tokens: 1, output_tokens: 1 },
      });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The loop's cost per step over calling the tool route directly: `steps` screenshot calls over
 * POST /v1/sessions/:id/tools/computer, then a run of `steps` steps (stopped by maxSteps) on the
 * same session against the zero-latency stand-in (the orchestrator was started with its URL).
 */
export async function measureLoopOverhead(client: SandboxClient, sandbox: Sandbox, steps: number): Promise<LoopOverhead> {
  const times: number[] = [];
  for (let i = 0; i < steps; i++) {
    const started = performance.now();
    await sandbox.executeToolUse({ action: 'screenshot' });
    times.push(performance.now() - started);
  }
  const started = performance.now();
  const run = await client.runs.create({ task: 'bench', sessionId: sandbox.id, maxSteps: steps });
  let end: { steps: number } | undefined;
  for await (const event of client.runs.events(run.id)) if (event.type === 'end') end = event;
  const elapsed = performance.now() - started;
  const done = end?.steps ?? 0;
  if (done !== steps) throw new Error(`the bench run made ${done} steps, not ${steps}`);
  const directMeanMs = times.reduce((a, b) => a + b, 0) / times.length;
  return { direct: summarize(times), directMeanMs, loopPerStepMs: elapsed / steps, steps };
}
