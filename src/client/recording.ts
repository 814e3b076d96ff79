import { serverSentEvents } from './event-stream.js';
import type { SandboxClient } from './index.js';
import type { RecordingStatus } from './api-types.js';
import type { ScreenshotFormatOptions } from './screenshot-format.js';

export type { RecordingStatus } from './api-types.js';

/**
 * A session's screen recording and its screen stream.
 *
 *   await sandbox.startRecording();
 *   ... the agent works ...
 *   await sandbox.stopRecording();
 *   await writeFile('session.mp4', await sandbox.downloadRecording());
 *
 *   for await (const frame of sandbox.screenStream({ fps: 2 })) show(frame.data);
 */

/** One frame of the screen stream: the image, decoded from base64. */
export interface ScreenFrame {
  seq: number;
  at: string;
  mediaType: string;
  width: number;
  height: number;
  data: Buffer;
}

export interface ScreenStreamOptions extends ScreenshotFormatOptions {
  /** How often the screen is looked at, 1-5 a second (default 2); only changes are sent. */
  fps?: number;
  signal?: AbortSignal;
}

const base = (id: string) => `/v1/sessions/${encodeURIComponent(id)}/recording`;

export function startRecording(client: SandboxClient, id: string): Promise<RecordingStatus> {
  return client.json<RecordingStatus>('POST', `${base(id)}/start`);
}

/** Stops recording; the video is complete once this returns. */
export function stopRecording(client: SandboxClient, id: string): Promise<RecordingStatus> {
  return client.json<RecordingStatus>('POST', `${base(id)}/stop`);
}

export function recordingStatus(client: SandboxClient, id: string): Promise<RecordingStatus> {
  return client.json<RecordingStatus>('GET', `${base(id)}/status`);
}

/** The video (MP4, H.264), whole, also after the session ended. */
export async function downloadRecording(client: SandboxClient, id: string, options: { signal?: AbortSignal } = {}): Promise<Buffer> {
  const response = await client.send(base(id), { method: 'GET', signal: options.signal });
  return Buffer.from(await response.arrayBuffer());
}

/** The agent's actions as WebVTT subtitles of the video. */
export async function recordingSubtitles(client: SandboxClient, id: string): Promise<string> {
  return (await client.send(`${base(id)}/subtitles`, { method: 'GET' })).text();
}

/** Frames as the screen changes (Server-Sent Events), until the session ends or `signal` aborts. */
export async function* screenStream(client: SandboxClient, id: string, options: ScreenStreamOptions = {}): AsyncGenerator<ScreenFrame> {
  const query = new URLSearchParams();
  if (options.fps !== undefined) query.set('fps', String(options.fps));
  if (options.format !== undefined) query.set('format', options.format);
  if (options.quality !== undefined) query.set('quality', String(options.quality));
  const response = await client.send(`/v1/sessions/${encodeURIComponent(id)}/screen/stream?${query}`, { method: 'GET', signal: options.signal });
  for await (const { event, data } of serverSentEvents(response.body)) {
    if (event === 'end') return;
    if (event !== 'frame' || data === '') continue;
    const frame = JSON.parse(data) as Omit<ScreenFrame, 'data'> & { data: string };
    yield { ...frame, data: Buffer.from(frame.data, 'base64') };
  }
}
