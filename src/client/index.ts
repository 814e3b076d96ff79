import { Processes } from './processes.js';
import { SandboxFs } from './fs.js';
import { ComputerActionMethods } from './computer-actions.js';
import { errorFor } from './errors.js';
import { openLiveView, type LiveView, type LiveViewOptions } from './live-view.js';
import { downloadFile, downloadFileStream, uploadFile, type FileRequestOptions, type UploadData, type UploadedFile, type UploadFileOptions } from './files.js';
import { downloadRecording, recordingStatus, recordingSubtitles, screenStream, startRecording, stopRecording } from './recording.js';
import type { RecordingStatus, ScreenFrame, ScreenStreamOptions } from './recording.js';
import { formatQuery, queryString, type ScreenshotFormatOptions } from './screenshot-format.js';
import type {
  ActionResult,
  BashToolInput,
  ComputerToolInput,
  CreateOptions,
  EditorToolInput,
  KeepaliveOptions,
  PauseMode,
  SessionInfo,
  TemplateInfo,
  TimeoutUpdate,
  ToolResult,
} from './types.js';
import { Volumes } from './volumes.js';
import { Snapshots } from './snapshots.js';
import { Runs } from './runs.js';
import { closeBrowser, SandboxPorts, startBrowser, type BrowserCdp } from './ports.js';
import { createLink, createTrajectoryLink, fetchTrajectory, type Trajectory } from './trajectory.js';

export * from './errors.js';
export type { ImageMediaType, ScreenshotFormatOptions } from './screenshot-format.js';
export type { DesktopWindow } from './desktop.js';
export type { RecordingStatus, ScreenFrame, ScreenStreamOptions } from './recording.js';
export type { FileRequestOptions, UploadData, UploadedFile, UploadFileOptions } from './files.js';
export type { RuntimeName } from './runtime-names.js';
export * from './types.js';
export * from './vendor-types.js';
export { Runs, type RunEvent, type RunInfo, type RunOptions } from './runs.js';
export { createLink, createTrajectoryLink, fetchTrajectory, type Trajectory, type TrajectoryLink, type TrajectoryStep } from './trajectory.js';
export type { LiveView, LiveViewOptions } from './live-view.js';
export { SandboxPorts, type BrowserCdp, type PortUrl, type PortUrlOptions } from './ports.js';
export {
  ProcessHandle,
  Processes,
  type ProcessEvent,
  type ProcessExitInfo,
  type ProcessInfo,
  type ProcessRead,
  type ProcessSignal,
  type StartProcessOptions,
} from './processes.js';
export { SandboxFs, type FsChange, type FsEntry } from './fs.js';
export { Volumes, type CreateVolumeOptions, type VolumeInfo } from './volumes.js';
export { Snapshots, type CreateSnapshotOptions, type SnapshotInfo } from './snapshots.js';

/** Where the client looks for the orchestrator unless told (SBX_URL, `--url`): `sbx serve`'s default address. */
export const DEFAULT_ORCHESTRATOR_URL = 'http://127.0.0.1:8080';

export interface ClientOptions {
  /** e.g. http://127.0.0.1:8080 (default: SBX_URL, else DEFAULT_ORCHESTRATOR_URL) */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer <apiKey>` (default: SBX_API_KEY). */
  apiKey?: string;
  /**
   * What sends the requests (default: the global fetch). The orchestrator's own MCP endpoint
   * passes one that hands each request to its routes in process, with the caller's key.
   */
  fetch?: typeof fetch;
}

/** A small typed client of the orchestrator's HTTP API. */
export class SandboxClient {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly fetch: typeof fetch;
  /** Runs of the built-in Claude loop (POST /v1/runs). */
  readonly runs: Runs = new Runs(this);
  /** The tenant's volumes (POST /v1/volumes). */
  readonly volumes: Volumes = new Volumes(this);
  /** The tenant's snapshots (POST /v1/sessions/:id/snapshots); fork one with create({ snapshot }). */
  readonly snapshots: Snapshots = new Snapshots(this);

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? process.env.SBX_URL ?? DEFAULT_ORCHESTRATOR_URL).replace(/\/$/, '');
    this.apiKey = options.apiKey ?? process.env.SBX_API_KEY;
    this.fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  async create(options: CreateOptions = {}): Promise<Sandbox> {
    const info = await this.json<SessionInfo>('POST', '/v1/sessions', options);
    return new Sandbox(this, info);
  }

  /** The built-in and user templates a session can name. */
  async listTemplates(): Promise<TemplateInfo[]> {
    return (await this.json<{ templates: TemplateInfo[] }>('GET', '/v1/templates')).templates;
  }

  async list(): Promise<SessionInfo[]> {
    return (await this.json<{ sessions: SessionInfo[] }>('GET', '/v1/sessions')).sessions;
  }

  async get(id: string): Promise<SessionInfo> {
    return this.json<SessionInfo>('GET', `/v1/sessions/${encodeURIComponent(id)}`);
  }

  /** A handle on an existing session. */
  async connect(id: string): Promise<Sandbox> {
    return new Sandbox(this, await this.get(id));
  }

  async destroy(id: string): Promise<SessionInfo> {
    return this.json<SessionInfo>('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }

  /** Resets the session's idle timer (optionally setting a new idle timeout). */
  async keepalive(id: string, options: KeepaliveOptions = {}): Promise<SessionInfo> {
    return this.json<SessionInfo>('POST', `/v1/sessions/${encodeURIComponent(id)}/keepalive`, options);
  }

  /** Changes the session's idle timeout and/or maximum lifetime (up to the server's maximum). */
  async updateTimeouts(id: string, update: TimeoutUpdate): Promise<SessionInfo> {
    return this.json<SessionInfo>('PATCH', `/v1/sessions/${encodeURIComponent(id)}`, update);
  }

  /** Pauses the session: memory (frozen in place), disk, or auto (the default: disk where available). */
  async pause(id: string, mode?: PauseMode | 'auto'): Promise<SessionInfo> {
    return this.json<SessionInfo>('POST', `/v1/sessions/${encodeURIComponent(id)}/pause`, mode === undefined ? {} : { mode });
  }

  /** Resumes a paused session: the same desktop, and the next action just works. */
  async resume(id: string): Promise<SessionInfo> {
    return this.json<SessionInfo>('POST', `/v1/sessions/${encodeURIComponent(id)}/resume`);
  }

  /** The screen at its size or (`scaled`) the model's, in `format` (else the session's), e.g. `{ format: 'jpeg', quality: 80 }`. */
  async screenshot(id: string, options: { scaled?: boolean } & ScreenshotFormatOptions = {}): Promise<Buffer> {
    const query = queryString([...(options.scaled ? ['scaled=true'] : []), ...formatQuery(options)]);
    const response = await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/screenshot${query}`);
    return Buffer.from(await response.arrayBuffer());
  }

  /** One action as plain JSON; `screenshot: true` adds the settled screen after it, in `format`. */
  async action(id: string, input: ComputerToolInput, options: { screenshot?: boolean } & ScreenshotFormatOptions = {}): Promise<ActionResult> {
    const query = queryString([...(options.screenshot ? ['screenshot=true'] : []), ...formatQuery(options)]);
    return this.json<ActionResult>('POST', `/v1/sessions/${encodeURIComponent(id)}/actions${query}`, input);
  }

  /** A model's tool_use input for one of the session's tools, as is; its tool_result back (images in `format`). */
  async executeToolUse(id: string, input: unknown, tool = 'computer', format: ScreenshotFormatOptions = {}): Promise<ToolResult> {
    const query = queryString(formatQuery(format));
    return this.json<ToolResult>('POST', `/v1/sessions/${encodeURIComponent(id)}/tools/${encodeURIComponent(tool)}${query}`, input);
  }

  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.request(method, path, body);
    return (await response.json()) as T;
  }

  private request(method: string, path: string, body?: unknown): Promise<Response> {
    if (body === undefined) return this.send(path, { method });
    return this.send(path, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  }

  /** A request with this client's credentials (any body: uploads, streams); a non-2xx answer becomes its typed error. */
  async send(path: string, init: RequestInit & { duplex?: 'half' }): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.apiKey) headers.set('authorization', `Bearer ${this.apiKey}`);
    const method = init.method ?? 'GET';
    const response = await this.fetch(this.baseUrl + path, { ...init, headers });
    if (!response.ok) {
      let code = 'http_error';
      let message = `${method} ${path}: HTTP ${response.status}`;
      try {
        const parsed = (await response.json()) as { error?: { code?: string; message?: string } };
        code = parsed.error?.code ?? code;
        message = parsed.error?.message ?? message;
      } catch {
        // not JSON: keep the generic message
      }
      const retryAfter = Number(response.headers.get('retry-after') ?? NaN);
      throw errorFor(response.status, code, message, Number.isFinite(retryAfter) ? retryAfter : undefined);
    }
    return response;
  }
}

/** One sandbox: a method per action (the desktop actions' are in desktop.ts, other vendors' calls in vendor-tools.ts). */
export class Sandbox extends ComputerActionMethods {
  constructor(
    protected readonly client: SandboxClient,
    public info: SessionInfo,
  ) {
    super();
    this.processes = new Processes(client, info.id);
    this.fs = new SandboxFs(client, info.id);
  }

  /** Processes: start (argv or cmd), output as an async iterator, stdin, signals, list, connect. */
  readonly processes: Processes;
  /** Filesystem calls: list, stat, mkdir, move, remove, watch. */
  readonly fs: SandboxFs;

  get id(): string {
    return this.info.id;
  }

  screenshot(options: { scaled?: boolean } & ScreenshotFormatOptions = {}): Promise<Buffer> {
    return this.client.screenshot(this.id, options);
  }

  action(input: ComputerToolInput, options: { screenshot?: boolean } & ScreenshotFormatOptions = {}): Promise<ActionResult> {
    return this.client.action(this.id, input, options);
  }

  /** Forwards a model's tool_use input unchanged (computer by default; 'bash', 'str_replace_based_edit_tool') and returns the tool_result content. */
  executeToolUse(input: unknown, tool = 'computer', format: ScreenshotFormatOptions = {}): Promise<ToolResult> {
    return this.client.executeToolUse(this.id, input, tool, format);
  }

  /** Runs a command in the session's persistent shell (the bash tool). */
  bash(command: string): Promise<ToolResult> {
    return this.executeToolUse({ command } satisfies BashToolInput, 'bash');
  }

  restartBash(): Promise<ToolResult> {
    return this.executeToolUse({ restart: true } satisfies BashToolInput, 'bash');
  }

  /** Views, creates or edits a file (the text editor tool). */
  editor(input: EditorToolInput): Promise<ToolResult> {
    return this.executeToolUse(input, 'str_replace_based_edit_tool');
  }

  /** Writes a file into the sandbox (streamed; replaced atomically). */
  upload(path: string, data: UploadData, options: UploadFileOptions = {}): Promise<UploadedFile> {
    return uploadFile(this.client, this.id, path, data, options);
  }

  /** Reads a whole file of the sandbox. */
  download(path: string, options: FileRequestOptions = {}): Promise<Buffer> {
    return downloadFile(this.client, this.id, path, options);
  }

  /** A file of the sandbox as a stream, for files too big to hold in memory. */
  downloadStream(path: string, options: FileRequestOptions = {}): ReturnType<typeof downloadFileStream> {
    return downloadFileStream(this.client, this.id, path, options);
  }

  /** Probes the sandbox now: SSH connection and display. */
  /** Every action and tool call of this session, in order, with timings and results (also after it ended). */
  trajectory = (): Promise<Trajectory> => fetchTrajectory(this.client, this.id);
  /** A short-lived URL of the trajectory viewer page, to open in a browser (createTrajectoryLink also gives its id, to revoke it). */
  trajectoryUrl = async (options: { ttlSeconds?: number } = {}): Promise<string> => (await createTrajectoryLink(this.client, this.id, options.ttlSeconds)).url;
  /**
   * A short-lived URL of a terminal page (a login shell as the sandbox user, in the browser).
   * Whoever holds it has a shell in the sandbox until it expires or is revoked (createLink gives its id).
   */
  terminalUrl = async (options: { ttlSeconds?: number } = {}): Promise<string> => (await createLink(this.client, this.id, 'terminal', options.ttlSeconds)).url;

  health(): Promise<{ state: string; healthy: boolean; ssh: 'ok' | 'down'; display: 'ok' | 'down'; detail?: string }> {
    return this.client.json('GET', `/v1/sessions/${encodeURIComponent(this.id)}/health`);
  }

  /** "Still here": resets the idle timer, optionally with a new idle timeout in seconds. */
  async keepalive(timeoutSeconds?: number): Promise<SessionInfo> {
    this.info = await this.client.keepalive(this.id, timeoutSeconds === undefined ? {} : { timeoutSeconds });
    return this.info;
  }

  /** Sets the idle timeout (seconds); with `maxLifetimeSeconds`, the lifetime too. */
  async setTimeout(timeoutSeconds: number, options: { maxLifetimeSeconds?: number } = {}): Promise<SessionInfo> {
    this.info = await this.client.updateTimeouts(this.id, { timeoutSeconds, ...options });
    return this.info;
  }

  /** Pauses it (see SandboxClient.pause); any later request resumes it unless it was created with autoResume false. */
  async pause(mode?: PauseMode | 'auto'): Promise<SessionInfo> {
    this.info = await this.client.pause(this.id, mode);
    return this.info;
  }

  async resume(): Promise<SessionInfo> {
    this.info = await this.client.resume(this.id);
    return this.info;
  }

  /** Sets the maximum lifetime (seconds from creation), up to the server's maximum. */
  async setMaxLifetime(maxLifetimeSeconds: number): Promise<SessionInfo> {
    this.info = await this.client.updateTimeouts(this.id, { maxLifetimeSeconds });
    return this.info;
  }

  /** Starts recording the screen to a video (see docs/api.md, "Recording and the screen stream"). */
  startRecording(): Promise<RecordingStatus> {
    return startRecording(this.client, this.id);
  }

  /** Stops recording; the video is complete once this returns. */
  stopRecording(): Promise<RecordingStatus> {
    return stopRecording(this.client, this.id);
  }

  recordingStatus(): Promise<RecordingStatus> {
    return recordingStatus(this.client, this.id);
  }

  /** The video (MP4), also after the session ended. */
  downloadRecording(options: { signal?: AbortSignal } = {}): Promise<Buffer> {
    return downloadRecording(this.client, this.id, options);
  }

  /** The agent's actions as WebVTT subtitles of the video. */
  recordingSubtitles(): Promise<string> {
    return recordingSubtitles(this.client, this.id);
  }

  /** Frames as the screen changes, until the session ends or `signal` aborts. */
  screenStream(options: ScreenStreamOptions = {}): AsyncGenerator<ScreenFrame> {
    return screenStream(this.client, this.id, options);
  }

  /** A live view in a browser: `view` only watches (input dropped by the server), `control` types and clicks. */
  liveView = (options: LiveViewOptions = {}): Promise<LiveView> => openLiveView(this.client, this.id, options);

  /** The guest's ports on URLs: `await sandbox.ports.url(3000)`. */
  get ports(): SandboxPorts {
    return new SandboxPorts(this.client, this.id);
  }

  /**
   * The desktop's Chromium (started unless it runs) and its CDP URL, for Playwright:
   * `chromium.connectOverCDP((await sandbox.browser()).cdpUrl)`.
   */
  browser(options: { ttlSeconds?: number } = {}): Promise<BrowserCdp> {
    return startBrowser(this.client, this.id, options);
  }

  /** Closes the desktop's Chromium (nothing if it does not run). */
  closeBrowser(): Promise<void> {
    return closeBrowser(this.client, this.id);
  }

  async refresh(): Promise<SessionInfo> {
    this.info = await this.client.get(this.id);
    return this.info;
  }

  async destroy(): Promise<void> {
    this.info = await this.client.destroy(this.id);
  }
}
