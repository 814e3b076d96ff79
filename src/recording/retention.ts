import { readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { RecordingStatus } from './session-recorder.js';

/** What is kept beside a video: whose it is and how it went (<id>.json). */
export interface RecordingMeta {
  sessionId: string;
  tenant: string;
  status: RecordingStatus;
}

export interface RetentionLimits {
  keepSeconds: number;
  totalMaxBytes: number;
}

/** The files of one recording, by session id (an id we made: [a-z0-9]). */
export function recordingFiles(dir: string, sessionId: string): { video: string; subtitles: string; meta: string } {
  if (!/^[a-z0-9]{1,64}$/.test(sessionId)) throw new Error(`not a session id: ${sessionId}`);
  return { video: path.join(dir, `${sessionId}.mp4`), subtitles: path.join(dir, `${sessionId}.vtt`), meta: path.join(dir, `${sessionId}.json`) };
}

export async function readMeta(dir: string, sessionId: string): Promise<RecordingMeta | undefined> {
  try {
    return JSON.parse(await readFile(recordingFiles(dir, sessionId).meta, 'utf8')) as RecordingMeta;
  } catch {
    return undefined;
  }
}

/**
 * Deletes finished recordings older than keepSeconds, then the oldest finished ones until all
 * recordings together fit in totalMaxBytes. Recordings in progress (`active`) are counted but
 * never deleted. Returns the ids deleted.
 */
export async function prune(dir: string, limits: RetentionLimits, active: ReadonlySet<string>, now = Date.now()): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const entries: { id: string; endedAt: number; bytes: number }[] = [];
  let total = 0;
  for (const name of names) {
    if (!name.endsWith('.json')) continue;
    const id = name.slice(0, -5);
    const meta = await readMeta(dir, id);
    if (!meta) continue;
    const files = recordingFiles(dir, id);
    let bytes = 0;
    for (const file of [files.video, files.subtitles])
      bytes += await stat(file).then(
        (s) => s.size,
        () => 0,
      );
    total += bytes;
    if (active.has(id)) continue;
    entries.push({ id, endedAt: Date.parse(meta.status.endedAt ?? meta.status.startedAt) || 0, bytes });
  }
  entries.sort((a, b) => a.endedAt - b.endedAt);
  const deleted: string[] = [];
  for (const entry of entries) {
    const expired = now - entry.endedAt > limits.keepSeconds * 1000;
    if (!expired && total <= limits.totalMaxBytes) continue;
    const files = recordingFiles(dir, entry.id);
    // The metadata last: a half-deleted recording is found and finished by the next prune.
    await rm(files.video, { force: true });
    await rm(files.subtitles, { force: true });
    await rm(files.meta, { force: true });
    total -= entry.bytes;
    deleted.push(entry.id);
  }
  return deleted;
}
