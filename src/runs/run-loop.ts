import type Anthropic from '@anthropic-ai/sdk';
import type { BetaContentBlock, BetaMessageParam, BetaToolResultBlockParam, BetaUsage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { keepRecentImages, markCacheBreakpoint } from './image-budget.js';
import type { SessionTools } from './session-tools.js';
import type { ToolSet } from './tool-versions.js';

/** Why a run ended. The model's own stops keep the API's names; budgets are ours. */
export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'refusal' | 'budget_steps' | 'budget_seconds' | 'budget_tokens' | 'cancelled' | 'error';
export type RunState = 'running' | 'completed' | 'stopped' | 'failed';

export interface RunUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadInputTokens: number;
  cacheCreationInputTokens: number;
}

/** What GET /v1/runs/:id/events streams, one per SSE message (no image data: a URL at most). */
export type RunEvent =
  | { type: 'text'; step: number; text: string }
  | { type: 'tool_call'; step: number; id: string; name: string; input: unknown }
  | { type: 'tool_result'; step: number; id: string; isError: boolean; summary: string; images: number; screenshot?: string }
  | { type: 'usage'; step: number; usage: RunUsage; stopReason: string | null }
  | { type: 'end'; state: RunState; stopReason: StopReason; steps: number; usage: RunUsage; error?: string };

export interface LoopOptions {
  client: Anthropic;
  tools: SessionTools;
  toolSet: ToolSet;
  sessionId: string;
  model: string;
  task: string;
  system: string;
  maxSteps: number;
  maxSeconds: number;
  maxTokens: number;
  /** Screenshots kept in the history sent to the model (older ones become a short text). */
  keepImages: number;
  /** max_tokens of each request. */
  responseTokens: number;
  /** The URL of a trajectory step's screenshot, for events. */
  screenshotUrl: (step: number) => string;
  emit: (event: RunEvent) => void;
}

/** Longest tool input or result text put in an event (the transcript keeps it all). */
const EVENT_TEXT_CHARS = 2000;

/**
 * Claude's computer-use loop (after Anthropic's reference sampling_loop): ask the model, run
 * each tool_use of its answer in order through our tools, send back the tool_results, until
 * it answers without a tool_use, a budget runs out, or the run is cancelled.
 */
export class RunLoop {
  readonly messages: BetaMessageParam[] = [];
  readonly usage: RunUsage = { inputTokens: 0, outputTokens: 0, cacheReadInputTokens: 0, cacheCreationInputTokens: 0 };
  steps = 0;
  private readonly abort = new AbortController();
  private stopAsked: StopReason | undefined;

  constructor(private readonly opts: LoopOptions) {
    this.messages.push({ role: 'user', content: [{ type: 'text', text: opts.task }] });
  }

  /** Stops the run at the next chance (the model request in flight is aborted). */
  stop(reason: StopReason): void {
    this.stopAsked ??= reason;
    this.abort.abort();
  }

  /** Runs to the end; never throws (a failure is the end event's error). */
  async run(): Promise<{ state: RunState; stopReason: StopReason; error?: string }> {
    const timer = setTimeout(() => this.stop('budget_seconds'), this.opts.maxSeconds * 1000);
    try {
      for (;;) {
        if (this.stopAsked) return this.stopped(this.stopAsked);
        if (this.steps >= this.opts.maxSteps) return this.stopped('budget_steps');
        if (this.totalTokens() >= this.opts.maxTokens) return this.stopped('budget_tokens');
        this.steps++;
        const response = await this.ask();
        this.messages.push({ role: 'assistant', content: response.content });
        const toolUses = response.content.filter((block) => block.type === 'tool_use');
        if (toolUses.length === 0) {
          const reason = response.stop_reason;
          const stopReason: StopReason = reason === 'max_tokens' || reason === 'stop_sequence' || reason === 'refusal' ? reason : 'end_turn';
          return { state: stopReason === 'end_turn' ? 'completed' : 'stopped', stopReason };
        }
        const results: BetaToolResultBlockParam[] = [];
        for (const block of toolUses) results.push(await this.callTool(block));
        this.messages.push({ role: 'user', content: results });
      }
    } catch (err) {
      if (this.stopAsked) return this.stopped(this.stopAsked);
      return { state: 'failed', stopReason: 'error', error: err instanceof Error ? err.message : String(err) };
    } finally {
      clearTimeout(timer);
    }
  }

  totalTokens(): number {
    const u = this.usage;
    return u.inputTokens + u.outputTokens + u.cacheReadInputTokens + u.cacheCreationInputTokens;
  }

  private stopped(stopReason: StopReason): { state: RunState; stopReason: StopReason } {
    return { state: 'stopped', stopReason };
  }

  private async ask(): Promise<{ content: BetaContentBlock[]; stop_reason: string | null }> {
    const { opts } = this;
    keepRecentImages(this.messages, opts.keepImages);
    markCacheBreakpoint(this.messages);
    const response = await opts.client.beta.messages.create(
      {
        model: opts.model,
        max_tokens: opts.responseTokens,
        system: [{ type: 'text', text: opts.system }],
        messages: this.messages,
        tools: opts.toolSet.tools,
        betas: [opts.toolSet.beta],
      },
      { signal: this.abort.signal },
    );
    this.addUsage(response.usage);
    opts.emit({ type: 'usage', step: this.steps, usage: { ...this.usage }, stopReason: response.stop_reason });
    for (const block of response.content) {
      if (block.type === 'text') opts.emit({ type: 'text', step: this.steps, text: block.text.slice(0, EVENT_TEXT_CHARS) });
    }
    return response;
  }

  private addUsage(usage: BetaUsage): void {
    this.usage.inputTokens += usage.input_tokens;
    this.usage.outputTokens += usage.output_tokens;
    this.usage.cacheReadInputTokens += usage.cache_read_input_tokens ?? 0;
    this.usage.cacheCreationInputTokens += usage.cache_creation_input_tokens ?? 0;
  }

  private async callTool(block: Extract<BetaContentBlock, { type: 'tool_use' }>): Promise<BetaToolResultBlockParam> {
    const { opts } = this;
    opts.emit({ type: 'tool_call', step: this.steps, id: block.id, name: block.name, input: eventInput(block.input) });
    const { result, screenshotStep } = await opts.tools.call(opts.sessionId, block.name, block.input, opts.toolSet.editorName);
    const text = result.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
    const images = result.content.filter((c) => c.type === 'image').length;
    opts.emit({
      type: 'tool_result',
      step: this.steps,
      id: block.id,
      isError: result.is_error,
      summary: text.slice(0, EVENT_TEXT_CHARS),
      images,
      ...(screenshotStep !== undefined ? { screenshot: opts.screenshotUrl(screenshotStep) } : {}),
    });
    return { type: 'tool_result', tool_use_id: block.id, content: result.content, is_error: result.is_error };
  }
}

/** A tool input for an event: as sent, unless its JSON is long (then cut, as a string). */
function eventInput(input: unknown): unknown {
  const json = JSON.stringify(input) ?? 'null';
  return json.length <= EVENT_TEXT_CHARS ? input : `${json.slice(0, EVENT_TEXT_CHARS)}…`;
}
