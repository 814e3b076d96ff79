import { appendFile, writeFile } from 'node:fs/promises';
import type { ComputerAction } from '../computer/actions.js';
import type { Point } from '../computer/scaling.js';

/** At most this many cues per recording (~100 bytes each): an agent cannot grow the file without bound. */
export const MAX_CUES = 20_000;
/** A cue stays on screen at least this long, so a quick click can be read. */
const MIN_CUE_MS = 1000;

/**
 * What a recorded action shows as a subtitle: click markers with their position (in the
 * video's pixels), typed text as its length only (never the text: it may be a password),
 * key names. Undefined for actions that show nothing (screenshot, cursor_position, zoom).
 */
export function cueText(action: ComputerAction, toScreen: (p: Point) => Point): string | undefined {
  const at = (p: Point | undefined) => {
    if (!p) return 'at the pointer';
    const s = toScreen(p);
    return `at (${s.x}, ${s.y})`;
  };
  switch (action.action) {
    case 'left_click':
    case 'right_click':
    case 'middle_click':
    case 'double_click':
    case 'triple_click':
      return `${action.action.replace('_', ' ')} ${at(action.coordinate)}${action.modifier ? ` with ${action.modifier.join('+')}` : ''}`;
    case 'left_click_drag':
      return `drag ${action.start ? `from ${at(action.start).slice(3)} ` : ''}to ${at(action.coordinate).slice(3)}`;
    case 'mouse_move':
      return `move ${at(action.coordinate)}`;
    case 'scroll':
      return `scroll ${action.direction} ${action.amount} ${at(action.coordinate)}`;
    case 'type':
      return `type ${[...action.text].length} characters`;
    case 'key':
      return `key ${action.combos.map((combo) => combo.join('+')).join(' ')}`;
    case 'hold_key':
      return `hold ${action.key.join('+')} ${action.seconds} s`;
    case 'left_mouse_down':
    case 'left_mouse_up':
      return action.action.replace(/_/g, ' ');
    case 'wait':
      return `wait ${action.seconds} s`;
    default:
      return undefined;
  }
}

/** hh:mm:ss.mmm as WebVTT writes a time. */
export function vttTime(ms: number): string {
  const whole = Math.max(0, Math.round(ms));
  const h = Math.floor(whole / 3_600_000);
  const m = Math.floor((whole % 3_600_000) / 60_000);
  const s = Math.floor((whole % 60_000) / 1000);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(h)}:${pad(m)}:${pad(s)}.${pad(whole % 1000, 3)}`;
}

/**
 * The recording's subtitle track, a WebVTT file served beside the video: one cue per agent
 * action, timed in the video (ms since the recording started). Appends are serialised; a
 * failed append is dropped (the video matters more than its captions).
 */
export class SubtitleTrack {
  private cues = 0;
  private writing: Promise<void>;

  constructor(readonly path: string) {
    this.writing = writeFile(path, 'WEBVTT\n\n', { mode: 0o600 }).catch(() => undefined);
  }

  add(startMs: number, durationMs: number, text: string): void {
    if (this.cues >= MAX_CUES) return;
    this.cues += 1;
    // The text is ours (cueText), one line, no "-->": it cannot break the file's syntax.
    const cue = `${this.cues}\n${vttTime(startMs)} --> ${vttTime(startMs + Math.max(durationMs, MIN_CUE_MS))}\n${text}\n\n`;
    this.writing = this.writing.then(() => appendFile(this.path, cue)).catch(() => undefined);
  }

  /** Settles once every cue added so far is on disk. */
  flush(): Promise<void> {
    return this.writing;
  }
}
