import { randomBytes } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import { cappedFetch, MAX_MODEL_REPLY_BYTES } from './capped-fetch.js';
import type { Logger } from 'pino';
import { InvalidRequestError, ModelKeyMissingError, NotFoundError, RunInProgressError } from '../errors.js';
import type { SessionDirectory } from '../sessions/ports.js';
import type { CreateSessionOptions } from '../sessions/session-request.js';
import type { TrajectoryRecorder } from '../sessions/trajectory/recorder.js';
import { RunBudgets, type RunReservation } from './run-budgets.js';
import { RunLoop, type RunEvent, type RunState, type RunUsage, type StopReason } from './run-loop.js';
import { RunStore, storableTranscript } from './run-store.js';
import type { BashOutput } from '../tools/bash/output-budget.js';
import { SessionTools, type RunToolSessions } from './session-tools.js';
import { DEFAULT_RUN_SETTINGS, type RunSettings } from './settings.js';
import { toolSet, type ToolVersion } from './tool-versions.js';

/** Where the loop finds the Messages API: read from the environment at the entry point. */
export interface AnthropicSettings {
  apiKey?: string;
  baseURL?: string;
}

export interface RunRequest {
  task: string;
  model?: string;
  toolVersion?: ToolVersion;
  maxSteps?: number;
  maxSeconds?: number;
  maxTokens?: number;
  sessionId?: string;
  session?: CreateSessionOptions;
  system?: string;
}

export interface RunView {
  id: string;
  sessionId: string;
  trajectoryId: string;
  task: string;
  model: string;
  toolVersion: ToolVersion;
  state: RunState;
  steps: number;
  usage: RunUsage;
  stopReason: StopReason | null;
  error?: string;
  createdAt: string;
  endedAt: string | null;
}

/** claude-sonnet-4-5 reaches its end of life on 2026-11-30 (the SDK warns of it): its successor. */
export const RUN_DEFAULTS = { model: 'claude-sonnet-4-6', toolVersion: 'computer_20251124', maxSteps: 50, maxSeconds: 1800, maxTokens: 2_000_000 } as const;
/** As the reference loop: the three most recent screenshots are enough to act on. */
const KEEP_IMAGES = 3;
const RESPONSE_TOKENS = 4096;
/** Events kept per run for late subscribers (each is small: no image data). */
const MAX_EVENTS = 2000;
const ENDED_KEPT_MS = 10 * 60_000;

interface LiveRun {
  view: RunView;
  tenant: string;
  loop: RunLoop;
  events: RunEvent[];
  listeners: Set<(event: RunEvent) => void>;
  done: Promise<void>;
}

export type RunSessions = SessionDirectory & RunToolSessions & { tenantOf(id: string): string | undefined };

/**
 * The runs of the built-in Claude loop: each drives one session (made for it or the tenant's
 * own), streams its events to subscribers, and stores its transcript when it ends.
 */
export class RunManager {
  private readonly runs = new Map<string, LiveRun>();
  /** The running run of each session that has one. */
  private readonly bySession = new Map<string, string>();
  private readonly client: Anthropic | undefined;
  private readonly tools: SessionTools;
  private readonly store: RunStore;
  /** Per-tenant models, runs at once, tokens and seconds a day. */
  readonly budgets: RunBudgets;

  constructor(
    private readonly opts: {
      sessions: RunSessions;
      database: ConstructorParameters<typeof RunStore>[0];
      anthropic: AnthropicSettings;
      bashTimeoutSeconds: number;
      /** The bash tool's output limits and counters (as the API's). */
      bashOutput?: BashOutput;
      trajectory?: TrajectoryRecorder;
      /** Per-tenant limits (default: DEFAULT_RUN_SETTINGS). */
      settings?: RunSettings;
      log: Logger;
    },
  ) {
    const { apiKey, baseURL } = opts.anthropic;
    this.client = apiKey ? new Anthropic({ apiKey, ...(baseURL ? { baseURL } : {}), fetch: cappedFetch(MAX_MODEL_REPLY_BYTES) }) : undefined;
    this.tools = new SessionTools(opts.sessions, {
      bashTimeoutSeconds: opts.bashTimeoutSeconds,
      ...(opts.bashOutput ? { bashOutput: opts.bashOutput } : {}),
      trajectory: opts.trajectory,
    });
    this.store = new RunStore(opts.database);
    // Today's spending survives a restart: it is read back from the stored runs of the day.
    const today = `${new Date().toISOString().slice(0, 10)}T00:00:00.000Z`;
    this.budgets = new RunBudgets(opts.settings ?? DEFAULT_RUN_SETTINGS, this.store.usageSince(today));
  }

  /** Starts a run; checks everything (key, session) before a sandbox is made. */
  async create(request: RunRequest, tenant: string, screenshotUrl: (sessionId: string, step: number) => string, placedSessionId?: string): Promise<RunView> {
    const { client } = this;
    if (!client) {
      throw new ModelKeyMissingError(
        'no Anthropic API key: set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for a proxy or gateway) in the environment of `sbx serve`',
      );
    }
    if (request.sessionId !== undefined && request.session !== undefined) {
      throw new InvalidRequestError('sessionId and session: give one (an existing sandbox, or how to make a new one), not both');
    }
    const { sessions } = this.opts;
    const model = request.model ?? RUN_DEFAULTS.model;
    this.budgets.checkModel(tenant, model, request.model !== undefined);
    if (request.sessionId !== undefined) {
      if (sessions.tenantOf(request.sessionId) !== tenant) throw new NotFoundError(`session ${request.sessionId} does not exist`);
      const running = this.bySession.get(request.sessionId);
      if (running)
        throw new RunInProgressError(
          `sessionId: session ${request.sessionId} is driven by run ${running}; stop it (DELETE /v1/runs/${running}) or wait for its end`,
        );
    }
    // The tenant's run slot and budget, before the first await: given back if the run does not start.
    const reservation = this.budgets.reserve(tenant, request, RUN_DEFAULTS);
    try {
      return await this.start(client, request, tenant, model, reservation, screenshotUrl, placedSessionId);
    } catch (err) {
      reservation.settle(0, 0);
      throw err;
    }
  }

  /** The run itself, once its checks passed and its budget is reserved (settled by the caller if this throws). */
  private async start(
    client: Anthropic,
    request: RunRequest,
    tenant: string,
    model: string,
    reservation: RunReservation,
    screenshotUrl: (sessionId: string, step: number) => string,
    placedSessionId: string | undefined,
  ): Promise<RunView> {
    const { sessions, trajectory } = this.opts;
    let sessionId: string;
    let version: ToolVersion;
    if (request.sessionId !== undefined) {
      sessionId = request.sessionId;
      version = request.toolVersion ?? sessions.get(sessionId).computerTool.type;
    } else {
      // A session made for the run shows the run's tool definition in its view.
      version = request.toolVersion ?? request.session?.toolVersion ?? RUN_DEFAULTS.toolVersion;
      const made = await sessions.create(
        { ...request.session, toolVersion: version },
        placedSessionId === undefined ? { tenant } : { tenant, sessionId: placedSessionId },
      );
      trajectory?.begin(made, request.session?.trajectory?.keepTypedText === true);
      sessionId = made.id;
    }
    const session = sessions.get(sessionId);
    const screen = { width: session.computerTool.display_width_px, height: session.computerTool.display_height_px };
    const id = `run_${randomBytes(12).toString('hex')}`;
    const view: RunView = {
      id,
      sessionId,
      trajectoryId: sessionId,
      task: request.task,
      model,
      toolVersion: version,
      state: 'running',
      steps: 0,
      usage: { inputTokens: 0, outputTokens: 0, cacheReadInputTokens: 0, cacheCreationInputTokens: 0 },
      stopReason: null,
      createdAt: new Date().toISOString(),
      endedAt: null,
    };
    const events: RunEvent[] = [];
    const listeners = new Set<(event: RunEvent) => void>();
    const emit = (event: RunEvent): void => {
      if (events.length < MAX_EVENTS || event.type === 'end') events.push(event);
      if (event.type !== 'end') view.steps = loop.steps;
      if (event.type === 'usage') view.usage = event.usage;
      for (const listener of listeners) listener(event);
    };
    const loop = new RunLoop({
      client,
      tools: this.tools,
      toolSet: toolSet(version, screen),
      sessionId,
      model: view.model,
      task: request.task,
      system: systemPrompt(request.system),
      maxSteps: request.maxSteps ?? RUN_DEFAULTS.maxSteps,
      maxSeconds: reservation.maxSeconds,
      maxTokens: reservation.maxTokens,
      keepImages: KEEP_IMAGES,
      responseTokens: RESPONSE_TOKENS,
      screenshotUrl: (step) => screenshotUrl(sessionId, step),
      emit,
    });
    const run: LiveRun = { view, tenant, loop, events, listeners, done: Promise.resolve() };
    this.runs.set(id, run);
    this.bySession.set(sessionId, id);
    this.save(run);
    // A session a run drives is in use while the model thinks too: its idle timeout waits for
    // the run (its lifetime does not).
    const startedAt = performance.now();
    run.done = sessions
      .whileBusy(sessionId, () => loop.run())
      .catch((err: unknown) => ({ state: 'failed' as const, stopReason: 'error' as const, error: err instanceof Error ? err.message : String(err) }))
      .then((end) => {
        reservation.settle(loop.totalTokens(), (performance.now() - startedAt) / 1000);
        Object.assign(view, { state: end.state, stopReason: end.stopReason, steps: loop.steps, usage: { ...loop.usage }, endedAt: new Date().toISOString() });
        if (end.error !== undefined) view.error = end.error;
        this.bySession.delete(sessionId);
        this.save(run);
        this.opts.log.info({ runId: id, sessionId, state: end.state, stopReason: end.stopReason, steps: loop.steps }, 'run ended');
        emit({
          type: 'end',
          state: end.state,
          stopReason: end.stopReason,
          steps: loop.steps,
          usage: { ...loop.usage },
          ...(end.error !== undefined ? { error: end.error } : {}),
        });
        listeners.clear();
        // Kept in memory a while for late subscribers' past events; the store keeps the rest.
        setTimeout(() => this.runs.delete(id), ENDED_KEPT_MS).unref();
      });
    return { ...view };
  }

  /** A run of the tenant's (live or stored); another tenant's is as one that does not exist. */
  get(id: string, tenant: string): RunView {
    const live = this.runs.get(id);
    if (live && live.tenant === tenant) return { ...live.view };
    const stored = this.store.get(id);
    if (!stored || stored.tenant !== tenant) throw new NotFoundError(`run ${id} does not exist`);
    return (JSON.parse(stored.transcript) as { view: RunView }).view;
  }

  /** Stops a running run (idempotent); answers once it has ended. */
  async cancel(id: string, tenant: string): Promise<RunView> {
    const live = this.runs.get(id);
    if (!live || live.tenant !== tenant) return this.get(id, tenant);
    live.loop.stop('cancelled');
    await live.done;
    return { ...live.view };
  }

  /** The run's events so far, and then each new one until the end (none after it). Returns the unsubscribe. */
  subscribe(id: string, tenant: string, listener: (event: RunEvent) => void): { past: RunEvent[]; unsubscribe: () => void } {
    const live = this.runs.get(id);
    if (!live || live.tenant !== tenant) {
      const view = this.get(id, tenant);
      const end: RunEvent = {
        type: 'end',
        state: view.state,
        stopReason: view.stopReason ?? 'error',
        steps: view.steps,
        usage: view.usage,
        ...(view.error !== undefined ? { error: view.error } : {}),
      };
      return { past: [end], unsubscribe: () => undefined };
    }
    const past = [...live.events];
    if (live.view.state === 'running') live.listeners.add(listener);
    return { past, unsubscribe: () => live.listeners.delete(listener) };
  }

  /** Stops every run (shutdown). */
  async stopAll(): Promise<void> {
    for (const run of this.runs.values()) run.loop.stop('cancelled');
    await Promise.all([...this.runs.values()].map((run) => run.done));
  }

  private save(run: LiveRun): void {
    const { view } = run;
    try {
      this.store.save({
        id: view.id,
        tenant: run.tenant,
        sessionId: view.sessionId,
        trajectoryId: view.trajectoryId,
        task: view.task,
        model: view.model,
        toolVersion: view.toolVersion,
        state: view.state,
        stopReason: view.stopReason,
        steps: view.steps,
        usage: JSON.stringify(view.usage),
        transcript: `{"view":${JSON.stringify(view)},"messages":${storableTranscript(run.loop.messages)}}`,
        createdAt: view.createdAt,
        endedAt: view.endedAt,
      });
    } catch (err) {
      this.opts.log.warn({ err, runId: view.id }, 'could not store a run');
    }
  }
}

/** The reference loop's system prompt, in short, with what the caller adds. */
function systemPrompt(extra: string | undefined): string {
  const base =
    'You are utilising an Ubuntu-like Linux virtual machine with internet access limited by its network policy. ' +
    'You can use the computer tool to see and act on the desktop, bash to run shell commands, and the text editor tool to view and edit files. ' +
    `The current date is ${new Date().toDateString()}.`;
  return extra ? `${base}\n\n${extra}` : base;
}
