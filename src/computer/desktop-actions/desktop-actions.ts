import { GuestProtocolError } from '../../errors.js';
import type { GuestConnection } from '../../transport/ssh-connection.js';
import { SerialQueue } from '../../util/serial-queue.js';
import { DesktopError } from '../desktop.js';
import {
  maxAnswerBytes,
  parseAnswer,
  parseClipboard,
  parseDesktopFile,
  parseFlag,
  parseScreen,
  parseWindows,
  type DesktopWindow,
  type ScreenSize,
} from './answers.js';
import { appId, clipboardText, openTarget, windowId, type DesktopRequest } from './requests.js';

/** Where the image installs the desktop helper (src/guest/files/sbx-desktop). */
export const DESKTOP_COMMAND = '/usr/local/bin/sbx-desktop';
/**
 * The helper waits at most 10 s for a process it runs (xclip, gio) and 2 s for the window
 * manager; this leaves room for its start-up on a busy guest.
 */
const ACTION_TIMEOUT_MS = 20_000;

/**
 * Desktop actions beyond raw input, for one session: open a URL or file, launch an app,
 * list, focus and close windows, the clipboard, the screen size. Each is one run of the
 * guest's desktop helper on its own channel of the session's SSH connection: the command
 * line is fixed, the request travels as JSON on its stdin (client text never meets a shell),
 * and its answer is capped and checked (answers.ts). One action at a time per session, so
 * a client cannot make a session hold many helpers at once.
 */
export class DesktopActions {
  private readonly queue = new SerialQueue();

  constructor(
    private readonly connection: GuestConnection,
    private readonly display: number,
  ) {}

  async open(target: unknown): Promise<{ target: string }> {
    const checked = openTarget(target);
    await this.call({ verb: 'open', target: checked }, () => undefined);
    return { target: checked };
  }

  async launch(app: unknown): Promise<{ app: string; file: string }> {
    const id = appId(app);
    return { app: id, file: await this.call({ verb: 'launch', app: id }, parseDesktopFile) };
  }

  async windows(): Promise<DesktopWindow[]> {
    return this.call({ verb: 'windows' }, parseWindows);
  }

  async focus(window: unknown): Promise<{ id: number; focused: boolean }> {
    const id = windowId(window);
    return { id, focused: await this.call({ verb: 'focus', window: id }, (fields) => parseFlag(fields, 'focused')) };
  }

  async close(window: unknown): Promise<{ id: number; closed: boolean }> {
    const id = windowId(window);
    return { id, closed: await this.call({ verb: 'close', window: id }, (fields) => parseFlag(fields, 'closed')) };
  }

  async clipboard(): Promise<string> {
    return this.call({ verb: 'clipboard-get' }, parseClipboard);
  }

  async setClipboard(text: unknown): Promise<{ bytes: number }> {
    const checked = clipboardText(text);
    await this.call({ verb: 'clipboard-set', text: checked }, () => undefined);
    return { bytes: Buffer.byteLength(checked, 'utf8') };
  }

  async screen(): Promise<ScreenSize> {
    return this.call({ verb: 'screen' }, parseScreen);
  }

  /** Runs the helper once and reads its answer with `read` (which throws on a broken one). */
  private call<T>(request: DesktopRequest, read: (fields: Record<string, unknown>) => T): Promise<T> {
    return this.queue.run(async () => {
      // The display number is our configuration, a number: the only variable in the line.
      const command = `LC_ALL=C.UTF-8 DISPLAY=:${this.display} exec /usr/bin/python3 -I ${DESKTOP_COMMAND}`;
      const result = await this.connection.exec(command, {
        stdin: JSON.stringify(request),
        timeoutMs: ACTION_TIMEOUT_MS,
        maxOutputBytes: maxAnswerBytes(request),
      });
      if (result.exitCode !== 0 || result.stdout.length === 0) {
        const said = result.stderr.toString('utf8').replace(/[\p{Cc}\p{Cf}]/gu, ' ').trim().slice(0, 300);
        throw new DesktopError(`the desktop helper failed in the guest (${said || `exit ${result.exitCode ?? result.signal}`})`);
      }
      try {
        return read(parseAnswer(result.stdout, request));
      } catch (err) {
        if (err instanceof GuestProtocolError) this.connection.reportProtocolError(err);
        throw err;
      }
    });
  }
}
