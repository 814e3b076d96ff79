import type { RawFrame } from '../computer/capture-channel.js';
import type { RecordingStatus } from '../recording/session-recorder.js';
import type { ComputerAction } from '../computer/actions.js';
import type { Scaler } from '../computer/scaling.js';
import type { EncodedImage } from '../computer/screenshot-format.js';
import type { OrchestratorError } from '../errors.js';
import type { RuntimeName } from '../runtimes/runtime.js';
import type { SessionAccess } from '../tools/session-access.js';
import type { SessionTimeoutUpdate } from './clocks.js';
import type { ActOptions, ActionOutcome, ScreenshotOptions, SessionHealth } from './session-actions.js';
import type { CreateSessionOptions, SessionOwner } from './session-request.js';
import type { EndReason } from './session-record.js';
import type { SessionView } from './session-view.js';
import type { PauseRequestMode } from './pause.js';

// The narrow interfaces the HTTP routes depend on: each route module asks for what it uses,
// never for the whole session manager (which implements them all).

/** Sessions as resources: create, list, look up, destroy. */
export interface SessionDirectory {
  create(options?: CreateSessionOptions, owner?: SessionOwner): Promise<SessionView>;
  list(tenant?: string): SessionView[];
  get(id: string): SessionView;
  destroy(id: string, reason?: EndReason): Promise<SessionView>;
  health(id: string): Promise<SessionHealth>;
}

/** The computer-use actions and screenshots of a ready session. */
export interface ComputerActions {
  screenshot(id: string, options?: ScreenshotOptions): Promise<EncodedImage>;
  act(id: string, input: unknown, options: ActOptions): Promise<ActionOutcome>;
  /** Actions already translated for the session's scaling (another vendor's call), run as `act` runs one. */
  perform(id: string, translate: (scaler: Scaler) => ComputerAction[], options: ActOptions): Promise<ActionOutcome>;
}

/**
 * A session's screen recording (recording/), and frames for the screen stream. `tenant` is the
 * request's: a recording whose own record names another tenant answers as one that does not
 * exist (checked by what the recording stores, also once its session's row is pruned).
 */
export interface SessionRecordings {
  startRecording(id: string): Promise<RecordingStatus>;
  stopRecording(id: string, tenant: string): Promise<RecordingStatus>;
  recordingStatus(id: string, tenant: string): Promise<RecordingStatus>;
  recordingFiles(id: string, tenant: string): Promise<{ video: string; subtitles: string; status: RecordingStatus }>;
}

/** The screen of a ready session as raw frames (the same object while nothing changed). */
export interface ScreenFrames {
  /** At most `maxAgeMs` old unless a capture is under way (then the last one): watchers never queue. */
  screenFrame(id: string, maxAgeMs: number): Promise<RawFrame | undefined>;
}

/** A session's clocks as a client moves them, and the busy mark long work holds. */
export interface SessionTimeouts {
  keepalive(id: string, timeoutSeconds?: number): SessionView;
  updateTimeouts(id: string, update: SessionTimeoutUpdate): SessionView;
  whileBusy<T>(id: string, work: () => Promise<T>): Promise<T>;
}

/** What the file routes need: the connection, and transfers that count as activity. */
export interface FileSessions {
  connection: SessionAccess['connection'];
  transferActivity(id: string): () => void;
}

/** What the companion tools' routes need. */
export type ToolSessions = SessionAccess & Pick<SessionTimeouts, 'whileBusy'> & { displayOf(id: string): number };

/** What the desktop-action routes need: the tools', and whether the agent has the desktop (not a person's takeover). */
export type DesktopSessions = ToolSessions & { checkAgentControl(id: string): void; displayStartedBySession(id: string): boolean };

/** Pause and resume (pause.ts), and the resume a request to a paused session makes first. */
export interface SessionPausing {
  pause(id: string, mode?: PauseRequestMode): Promise<SessionView>;
  resume(id: string): Promise<SessionView>;
  ensureRunning(id: string): Promise<void>;
}

/** What a request that failed unexpectedly asks (server.ts's error handler). */
export interface SessionFailures {
  endedUnderRequest(id: string): Promise<OrchestratorError | undefined>;
}

/** The health route's view of the whole. */
export interface SystemStatus {
  readonly runtimeName: RuntimeName;
  list(tenant?: string): SessionView[];
}
