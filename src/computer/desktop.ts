import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { commandLine } from '../transport/quote.js';
import type { GuestConnection } from '../transport/ssh-connection.js';
import type { Point, Size } from './scaling.js';
import { SerialQueue } from '../util/serial-queue.js';
import { CaptureChannel, CaptureChannelError, type RawFrame } from './capture-channel.js';
import { InputChannel, InputChannelError, type InputResult } from './input-channel.js';
import { KeymapBinder, spareKeycodes } from './keymap.js';

/** A display command failed inside the guest (e.g. the X server is gone). */
export class DesktopError extends OrchestratorError {
  constructor(message: string) {
    super(message, 502, 'desktop_error');
  }
}

/** What the screen looked like: raw pixels (the fast path) or a PNG (scrot, the fallback). */
export type Capture = { frame: RawFrame; png?: undefined } | { png: Buffer; frame?: undefined };

/** Per-keystroke delay, as in the reference implementation: some applications drop faster input. */
const TYPE_DELAY_MS = 12;
const COMMAND_TIMEOUT_MS = 15_000;
/** What a display command other than scrot may print: a keymap (xmodmap -pke) is ~10 KiB. */
const MAX_COMMAND_OUTPUT_BYTES = 256 * 1024;

/**
 * The guest's X display, driven with xdotool and captured with scrot over the session's
 * SSH connection. Commands are built from argument vectors and quoted; text to type goes
 * on standard input (`xdotool type --file -`), so model text never meets a shell.
 */
export class Desktop {
  /** Keysyms bound for non-ASCII text; created on first use (see keymap.ts). */
  private keymap: KeymapBinder | undefined;
  /** Typing changes the keymap: one text at a time per session (other sessions are not held). */
  private readonly typing = new SerialQueue();
  private inputChannel: InputChannel | undefined;
  private readonly inputQueue = new SerialQueue();
  private captureChannel: CaptureChannel | undefined;
  private readonly captureQueue = new SerialQueue();

  constructor(
    private readonly connection: GuestConnection,
    private readonly display: number,
    /** The session's screen: every frame the guest sends is checked against it. */
    private readonly screen: Size,
  ) {}

  /**
   * The screen now: a raw frame from the session's persistent grabber, or, if that cannot
   * run (an image without it, a grabber that just died), a PNG from scrot. A grabber that
   * broke the protocol (a frame that does not fit the screen) fails the request with a 502:
   * falling back would hide a guest that lies.
   */
  capture(): Promise<Capture> {
    return this.captureQueue.run(async () => {
      try {
        if (!this.captureChannel?.isOpen) this.captureChannel = await CaptureChannel.open(this.connection, this.display, this.screen);
        return { frame: await this.captureChannel.grab(COMMAND_TIMEOUT_MS) };
      } catch (err) {
        this.captureChannel?.close();
        this.captureChannel = undefined;
        if (!(err instanceof CaptureChannelError)) throw err;
        return { png: await this.screenshot() };
      }
    });
  }

  /** A PNG from scrot: one process per capture (the fallback, and the benchmark's floor). */
  async screenshot(): Promise<Buffer> {
    // `scrot -` writes the PNG to standard output: no file in the guest, one round trip. A
    // PNG of the screen is never much larger than its raw RGB pixels.
    const maxPngBytes = this.screen.width * this.screen.height * 4 + 64 * 1024;
    const { stdout } = await this.run(['scrot', '--silent', '-'], undefined, COMMAND_TIMEOUT_MS, maxPngBytes);
    if (stdout.length < 8 || stdout.readUInt32BE(0) !== 0x89504e47) {
      throw new DesktopError('scrot did not return a PNG image');
    }
    return stdout;
  }

  async cursorPosition(timeoutMs = COMMAND_TIMEOUT_MS): Promise<Point> {
    const { stdout } = await this.input(['getmouselocation'], timeoutMs);
    const match = /^x:(\d+) y:(\d+)/m.exec(stdout);
    if (!match) throw new DesktopError(`unexpected xdotool output: ${stdout.slice(0, 200)}`);
    return { x: Number(match[1]), y: Number(match[2]) };
  }

  /** Runs one xdotool command line (arguments are validated keysym names and numbers). */
  async xdotool(args: string[], timeoutMs = COMMAND_TIMEOUT_MS): Promise<void> {
    if (args.length === 0) return;
    const { stderr } = await this.input(args, timeoutMs);
    // xdotool warns about an unknown key name but still exits 0: that is the model's error.
    const unknown = /No such key name '([^']*)'/.exec(stderr);
    if (unknown) throw new InvalidRequestError(`unknown key name "${unknown[1]}" (use X keysym names such as Return, ctrl, alt, Page_Down, F5)`);
  }

  /** Stops the session's input and capture processes (destroy). */
  close(): void {
    this.inputChannel?.close();
    this.inputChannel = undefined;
    this.captureChannel?.close();
    this.captureChannel = undefined;
  }

  /**
   * A command on the session's persistent xdotool (see input-channel.ts), one at a time.
   * A channel that cannot be opened or has died is replaced on the next command; a command
   * that failed on it is not repeated (it may have run), its error is reported.
   */
  private input(args: string[], timeoutMs: number): Promise<InputResult> {
    return this.inputQueue.run(async () => {
      try {
        if (!this.inputChannel?.isOpen) this.inputChannel = await InputChannel.open(this.connection, this.display);
        return await this.inputChannel.run(args, timeoutMs);
      } catch (err) {
        this.inputChannel?.close();
        this.inputChannel = undefined;
        throw err instanceof InputChannelError ? new DesktopError(`xdotool failed in the guest: ${err.message}`) : err;
      }
    });
  }

  /** Types text literally, one text at a time per session (other sessions are not held). */
  type(text: string): Promise<void> {
    return this.typing.run(() => this.typeText(text));
  }

  private async typeText(text: string): Promise<void> {
    try {
      this.keymap ??= new KeymapBinder(spareKeycodes((await this.run(['xmodmap', '-pke'])).stdout.toString('utf8')));
      // xdotool types "\n" as the Linefeed keysym, which most applications ignore: a new
      // line is pressed as Return, as a person would.
      const lines = text.replace(/\r\n?/g, '\n').split('\n');
      for (const [index, line] of lines.entries()) {
        if (index > 0) await this.run(['xdotool', 'key', 'Return']);
        for (const { chunk, bindings } of this.keymap.plan(line)) {
          // xmodmap reads the bindings on stdin; they are made from code points, not from text.
          if (bindings) await this.run(['xmodmap', '-'], bindings);
          await this.run(['xdotool', 'type', '--delay', String(TYPE_DELAY_MS), '--file', '-'], chunk, typingTimeout(chunk));
        }
      }
    } catch (err) {
      // The keymap may be other than we think (e.g. the display restarted): learn it again.
      this.keymap = undefined;
      throw err;
    }
  }

  private async run(
    argv: string[],
    stdin?: string,
    timeoutMs = COMMAND_TIMEOUT_MS,
    maxOutputBytes = MAX_COMMAND_OUTPUT_BYTES,
  ): Promise<{ stdout: Buffer; stderr: Buffer }> {
    // A UTF-8 locale, or xdotool cannot decode non-ASCII text (C.UTF-8 is built into glibc).
    const command = `LC_ALL=C.UTF-8 DISPLAY=:${this.display} ${commandLine(argv)}`;
    const result = await this.connection.exec(command, { stdin, timeoutMs, maxOutputBytes });
    if (result.exitCode !== 0) {
      const detail = result.stderr.toString('utf8').trim().slice(0, 500) || `exit ${result.exitCode ?? result.signal}`;
      throw new DesktopError(`${argv[0]} failed in the guest: ${detail}`);
    }
    return result;
  }
}

function typingTimeout(text: string): number {
  return COMMAND_TIMEOUT_MS + [...text].length * TYPE_DELAY_MS * 3;
}
