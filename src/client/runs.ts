import { serverSentEvents } from './event-stream.js';
import type { SandboxClient } from './index.js';

/** POST /v1/runs: a task for the built-in Claude loop, on a new sandbox (`session`) or an existing one (`sessionId`). */
export interface RunOptions {
  task: string;
  model?: string;
  toolVersion?: 'computer_20241022' | 'computer_20250124' | 'computer_20251124';
  maxSteps?: number;
  maxSeconds?: number;
  maxTokens?: number;
  sessionId?: string;
  session?: Record<string, unknown>;
  system?: string;
}

export interface RunInfo {
  id: string;
  sessionId: string;
  trajectoryId: string;
  task: string;
  model: string;
  toolVersion: string;
  state: 'running' | 'completed' | 'stopped' | 'failed';
  steps: number;
  usage: { inputTokens: number; outputTokens: number; cacheReadInputTokens: number; cacheCreationInputTokens: number };
  stopReason: string | null;
  error?: string;
  createdAt: string;
  endedAt: string | null;
}

/** One Server-Sent Event of GET /v1/runs/:id/events (see docs/api.md). */
export type RunEvent =
  | { type: 'text'; step: number; text: string }
  | { type: 'tool_call'; step: number; id: string; name: string; input: unknown }
  | { type: 'tool_result'; step: number; id: string; isError: boolean; summary: string; images: number; screenshot?: string }
  | { type: 'usage'; step: number; usage: RunInfo['usage']; stopReason: string | null }
  | { type: 'end'; state: RunInfo['state']; stopReason: string; steps: number; usage: RunInfo['usage']; error?: string };

/** client.runs: start, follow and stop runs of the built-in Claude loop. */
export class Runs {
  constructor(private readonly client: SandboxClient) {}

  create(options: RunOptions): Promise<RunInfo> {
    return this.client.json<RunInfo>('POST', '/v1/runs', options);
  }

  get(id: string): Promise<RunInfo> {
    return this.client.json<RunInfo>('GET', `/v1/runs/${encodeURIComponent(id)}`);
  }

  /** Stops the run; resolves once it has stopped. */
  cancel(id: string): Promise<RunInfo> {
    return this.client.json<RunInfo>('DELETE', `/v1/runs/${encodeURIComponent(id)}`);
  }

  /** The run's events from its start, as they come; the iteration ends after the `end` event. */
  async *events(id: string): AsyncGenerator<RunEvent> {
    const response = await this.client.send(`/v1/runs/${encodeURIComponent(id)}/events`, { method: 'GET', headers: { accept: 'text/event-stream' } });
    for await (const { data } of serverSentEvents(response.body)) {
      if (!data) continue;
      const event = JSON.parse(data) as RunEvent;
      yield event;
      if (event.type === 'end') return;
    }
  }
}
