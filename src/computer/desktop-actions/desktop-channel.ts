import { GuestProtocolError } from '../../errors.js';
import type { GuestTransport } from '../../transport/index.js';
import { GuestProcessChannel } from '../guest-process-channel.js';

/** Where the image installs the persistent desktop helper (src/guest/files/sbx-desktopd). */
export const DESKTOPD_COMMAND = '/usr/local/bin/sbx-desktopd';
/**
 * The start line's exit status when the image has no sbx-desktopd (built before it, with the
 * one-shot /usr/local/bin/sbx-desktop): the session then runs that one per action instead.
 */
export const HELPER_MISSING_EXIT = 86;
/** An answer frame: this tag, the payload's length (uint32, big-endian), the payload. */
const FRAME_TAG = Buffer.from('SBXD', 'latin1');
const HEADER_BYTES = 8;

export class DesktopChannelError extends Error {}

/**
 * The session's long-lived desktop helper (sbx-desktopd in the guest) on a channel of its SSH
 * connection: one JSON request per line in, one answer frame per request out, one request
 * at a time. An action costs a write and a read on an open channel, not a process.
 *
 * The guest is hostile, so an answer is bounded before any of it is kept: its header is read
 * into 8 bytes of our own, and a frame whose tag is not ours or whose announced length is more
 * than this request's answer can be (maxBytes) fails the request at once, naming the guest
 * (502), and closes the channel. Only then is the payload kept, chunk by chunk, never more
 * than it announced; a byte beyond the frame, or one nobody asked for, is a protocol error too.
 */
export class DesktopChannel extends GuestProcessChannel<Buffer> {
  private readonly header = Buffer.alloc(HEADER_BYTES);
  private headerFilled = 0;
  /** The payload's announced length, once the header has passed; -1 before. */
  private length = -1;
  private payload: Buffer[] = [];
  private received = 0;
  private maxBytes = 0;
  private exitCode: number | null | undefined;

  private constructor() {
    super((message) => new DesktopChannelError(message));
  }

  static async open(connection: GuestTransport, display: number): Promise<DesktopChannel> {
    if (!Number.isInteger(display) || display < 0) throw new DesktopChannelError(`bad display number ${display}`);
    const desktop = new DesktopChannel();
    // A fixed line: the display number, a checked integer, is its only variable. -I: nothing
    // from the user's home or environment is imported. C.UTF-8: titles and the clipboard are
    // UTF-8 whatever the image's locale.
    const channel = await connection.spawn(
      `[ -e ${DESKTOPD_COMMAND} ] || exit ${HELPER_MISSING_EXIT}; LC_ALL=C.UTF-8 DISPLAY=:${display} exec /usr/bin/python3 -I ${DESKTOPD_COMMAND}`,
    );
    // sshd sends the exit status before it closes the channel.
    channel.on('exit', (code: number | null) => (desktop.exitCode = code));
    desktop.attach(channel, 'desktop', { label: 'desktop', sink: connection });
    return desktop;
  }

  /** The channel ended because the image has no sbx-desktopd (see HELPER_MISSING_EXIT). */
  get helperMissing(): boolean {
    return this.exitCode === HELPER_MISSING_EXIT;
  }

  /** The helper's process ended before a byte of the answer came (it may have died before it read the request). */
  get endedUnanswered(): boolean {
    return this.closedByGuest && this.headerFilled === 0;
  }

  /** Sends one request line; resolves with its answer's payload (at most maxBytes), within timeoutMs. */
  ask(line: string, maxBytes: number, timeoutMs: number): Promise<Buffer> {
    if (this.busy) return Promise.reject(new DesktopChannelError('the desktop channel is busy'));
    this.headerFilled = 0;
    this.length = -1;
    this.payload = [];
    this.received = 0;
    this.maxBytes = maxBytes;
    return this.request(line, timeoutMs);
  }

  protected onData(chunk: Buffer): void {
    if (!this.isOpen) return;
    if (!this.busy) return this.fail(broken('unrequested_output', 'bytes nobody asked for'));
    let offset = 0;
    if (this.length < 0) {
      const take = Math.min(HEADER_BYTES - this.headerFilled, chunk.length);
      chunk.copy(this.header, this.headerFilled, 0, take);
      this.headerFilled += take;
      offset = take;
      if (this.headerFilled < HEADER_BYTES) return;
      if (!this.header.subarray(0, 4).equals(FRAME_TAG)) {
        return this.fail(broken('bad_frame', `something that is not an answer frame (${JSON.stringify(this.header.toString('latin1'))})`));
      }
      const length = this.header.readUInt32BE(4);
      if (length > this.maxBytes) {
        return this.fail(broken('answer_too_large', `an answer of ${length} bytes, more than this request's answer can be (${this.maxBytes})`));
      }
      this.length = length;
    }
    const take = Math.min(this.length - this.received, chunk.length - offset);
    if (take > 0) {
      this.payload.push(chunk.subarray(offset, offset + take));
      this.received += take;
      offset += take;
    }
    if (this.received < this.length) return;
    if (offset < chunk.length) return this.fail(broken('unrequested_output', 'bytes beyond its answer'));
    const answer = Buffer.concat(this.payload, this.received);
    this.payload = [];
    this.settle(answer);
  }
}

function broken(reason: string, what: string): GuestProtocolError {
  return new GuestProtocolError('desktop', reason, `the desktop helper in the guest sent ${what}`);
}
