/**
 * The bounds of the process API (docs/api.md#processes). Constants rather than settings: each
 * is a cap on what one session may make the orchestrator hold, and they are documented as such.
 */
export interface ProcessLimits {
  /** Processes running at once in one session (taken in one synchronous step with the check). */
  maxRunning: number;
  /** Finished processes kept (their exit status and last output) for a late reader, oldest forgotten first. */
  maxFinished: number;
  /** How long a finished process is kept. */
  finishedRetentionMs: number;
  /** Output kept per process for replay and for a reader that fell behind; older output is dropped with a marker. */
  bufferBytesPerProcess: number;
  /** Output kept across all of a session's processes. */
  bufferBytesPerSession: number;
  /** Bytes a second read from one process on average (beyond the burst the channel is paused, not dropped). */
  bytesPerSecond: number;
  burstBytes: number;
  /** Readers attached to one process at once (SSE and WebSocket). */
  maxReadersPerProcess: number;
  /**
   * An attached reader that holds the process back (it is this far behind) and has not read
   * anything for this long is disconnected: a stuck client never blocks a process forever.
   */
  readerStallMs: number;
  /** Between SIGTERM and SIGKILL when a process is killed (or its timeoutSeconds ran out). */
  killGraceMs: number;
  /** Opening the channel and the guest's first line. */
  startTimeoutMs: number;
}

export const DEFAULT_PROCESS_LIMITS: ProcessLimits = {
  maxRunning: 16,
  maxFinished: 16,
  finishedRetentionMs: 10 * 60_000,
  bufferBytesPerProcess: 1024 * 1024,
  bufferBytesPerSession: 8 * 1024 * 1024,
  bytesPerSecond: 16 * 1024 * 1024,
  burstBytes: 64 * 1024 * 1024,
  maxReadersPerProcess: 4,
  readerStallMs: 30_000,
  killGraceMs: 3_000,
  startTimeoutMs: 15_000,
};
