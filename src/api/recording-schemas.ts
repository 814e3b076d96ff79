/** A session's recording as the API shows it (recording/session-recorder.ts, RecordingStatus). */
export const recordingStatusSchema = {
  type: 'object',
  description: "The session's screen recording: in progress, finished, or failed (error says why; the session goes on)",
  required: ['state', 'startedAt', 'bytes', 'fps', 'frames'],
  properties: {
    state: { type: 'string', enum: ['recording', 'finished', 'failed'] },
    startedAt: { type: 'string', format: 'date-time', description: "Time 0 of the video: a moment's offset in it is the ms since then" },
    endedAt: { type: 'string', format: 'date-time' },
    stopReason: { type: 'string', enum: ['requested', 'session_ended', 'size_cap', 'duration_cap', 'failed'] },
    bytes: { type: 'integer', description: 'Size of the video file (MP4, H.264)' },
    fps: { type: 'integer' },
    frames: { type: 'integer', description: 'Frames written so far (an unchanged screen is repeated)' },
    error: { type: 'string' },
  },
} as const;
