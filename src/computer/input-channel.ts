import type { GuestChannel, GuestTransport } from '../transport/index.js';
import { GuestProcessChannel } from './guest-process-channel.js';
import type { InputRequest } from './input-requests.js';

/** Where the image installs the input helper (src/guest/files/sbx-input). */
export const INPUT_COMMAND = '/usr/local/bin/sbx-input';

/**
 * The session's long-lived input helper (sbx-input in the guest) on a channel of its SSH
 * connection. An action costs one write and one read on an open channel: no process, no
 * shell, no xdotool start-up per action.
 *
 * sbx-input has no command language: one request per line from a closed set of verbs, and
 * one answer line per request (`ok [x y]` or `err <reason>`) once the X server has applied
 * it. The requests of an action are written at once and the action is done when every
 * answer is in. Every line is built here from typed requests and checked once more before
 * it is written, so nothing but a verb, numbers and a keysym name can reach the helper.
 *
 * What the guest sends back is hostile too: answers are read as they arrive, only the
 * unfinished line is kept (at most MAX_ANSWER_BYTES), and a line that is too long, not an
 * answer, or not asked for closes the channel.
 */
const MAX_ANSWER_BYTES = 256;
const KEYSYM = /^[A-Za-z0-9_]{1,64}$/;
const MAX_COORDINATE = 32767;
const OK = /^ok(?: (\d{1,5}) (\d{1,5}))?$/;
const ERR = /^err ([\x20-\x7e]{1,200})$/;

export class InputChannelError extends Error {}

/** One answer: `ok` (with the pointer's position for `where`), or the helper's refusal. */
export type InputAnswer = { ok: true; position?: { x: number; y: number } } | { ok: false; reason: string };

export class InputChannel extends GuestProcessChannel<InputAnswer[]> {
  /** The answer line being received (never a whole stream: see onData). */
  private partial = '';
  private answers: InputAnswer[] = [];
  private expected = 0;

  private constructor() {
    super((message) => new InputChannelError(message));
  }

  /** `launch`: the helper's channel from elsewhere (a warm launcher: warm-helpers.ts) instead of a process started here. */
  static async open(connection: GuestTransport, display: number, launch?: () => Promise<GuestChannel>): Promise<InputChannel> {
    const input = new InputChannel();
    // -I: nothing from the user's home or environment (usercustomize, PYTHONPATH) is imported.
    input.attach(launch ? await launch() : await connection.spawn(`DISPLAY=:${display} exec /usr/bin/python3 -I ${INPUT_COMMAND}`), 'input');
    return input;
  }

  /** Sends the requests of one action; resolves with one answer per request. One at a time. */
  run(requests: readonly InputRequest[], timeoutMs: number): Promise<InputAnswer[]> {
    if (requests.length === 0) return Promise.resolve([]);
    let lines: string;
    try {
      lines = requests.map(requestLine).join('');
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.busy) return Promise.reject(new InputChannelError('the input channel is busy'));
    this.partial = '';
    this.answers = [];
    this.expected = requests.length;
    return this.request(lines, timeoutMs);
  }

  protected onData(chunk: Buffer): void {
    const pieces = chunk.toString('latin1').split('\n');
    // Every piece but the last ends a line; the last is the start of the next one.
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i] as string;
      if (this.partial.length + piece.length > MAX_ANSWER_BYTES) {
        return this.fail(new InputChannelError(`the input helper sent a line longer than ${MAX_ANSWER_BYTES} bytes`));
      }
      if (i === pieces.length - 1) {
        this.partial += piece;
        return;
      }
      const line = this.partial + piece;
      this.partial = '';
      if (!this.accept(line)) return;
    }
  }

  /** Takes one answer line; false once the channel has been failed. */
  private accept(line: string): boolean {
    if (!this.busy || this.answers.length >= this.expected) {
      this.fail(new InputChannelError('the input helper answered a request that was not sent'));
      return false;
    }
    const ok = OK.exec(line);
    const err = ok ? null : ERR.exec(line);
    if (!ok && !err) {
      this.fail(new InputChannelError(`the input helper's answer is not one: ${JSON.stringify(line.slice(0, 80))}`));
      return false;
    }
    if (ok) this.answers.push(ok[1] === undefined ? { ok: true } : { ok: true, position: { x: Number(ok[1]), y: Number(ok[2]) } });
    else this.answers.push({ ok: false, reason: err?.[1] as string });
    if (this.answers.length === this.expected) this.settle(this.answers);
    return true;
  }
}

/** The request as the helper reads it; throws on anything that is not a clean request. */
export function requestLine(request: InputRequest): string {
  switch (request.verb) {
    case 'move':
      return `move ${coordinate(request.x)} ${coordinate(request.y)}\n`;
    case 'button':
      if (!Number.isInteger(request.button) || request.button < 1 || request.button > 9) throw new InputChannelError(`no mouse button ${request.button}`);
      return `button ${request.button} ${request.down ? 'down' : 'up'}\n`;
    case 'key':
      if (!KEYSYM.test(request.keysym)) throw new InputChannelError(`${JSON.stringify(request.keysym.slice(0, 40))} is not a keysym name`);
      return `key ${request.keysym} ${request.down ? 'down' : 'up'}\n`;
    case 'where':
      return 'where\n';
  }
}

function coordinate(value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > MAX_COORDINATE) throw new InputChannelError(`coordinate ${value} is out of range`);
  return value;
}
