import type { SandboxClient } from './index.js';

/**
 * Desktop actions beyond raw input (/v1/sessions/:id/desktop/...), as methods of a Sandbox:
 *
 *   await sandbox.open('https://example.com/');        // in the default browser
 *   await sandbox.launch('debian-xterm');              // by desktop-file id
 *   const [first] = await sandbox.windows();
 *   await sandbox.focusWindow(first.id);
 *   await sandbox.setClipboard('héllo');
 */

/** One top-level window, as the window manager lists it. */
export interface DesktopWindow {
  /** The X window id: what focusWindow and closeWindow take. */
  id: number;
  title: string;
  /** WM_CLASS's class (`XTerm`) and instance (`xterm`). */
  app: string;
  instance: string;
  x: number;
  y: number;
  width: number;
  height: number;
  /** The active window. */
  focused: boolean;
}

export abstract class DesktopMethods {
  protected abstract readonly client: SandboxClient;
  abstract get id(): string;

  /** Opens a URL (http, https, file, mailto) or an absolute path in its default application. */
  async open(target: string): Promise<void> {
    await this.client.json('POST', this.desktopPath('open'), { target });
  }

  /** Starts an application by its desktop-file id (`debian-xterm`); the path of the file used. */
  async launch(app: string): Promise<{ app: string; file: string }> {
    return this.client.json('POST', this.desktopPath('launch'), { app });
  }

  async windows(): Promise<DesktopWindow[]> {
    return (await this.client.json<{ windows: DesktopWindow[] }>('GET', this.desktopPath('windows'))).windows;
  }

  /** Makes a window the active one; false if the window manager did not within 2 s. */
  async focusWindow(windowId: number): Promise<boolean> {
    return (await this.client.json<{ focused: boolean }>('POST', this.desktopPath(`windows/${windowId}/focus`))).focused;
  }

  /** Asks a window to close; false if it is still there after 2 s (it may ask to save first). */
  async closeWindow(windowId: number): Promise<boolean> {
    return (await this.client.json<{ closed: boolean }>('POST', this.desktopPath(`windows/${windowId}/close`))).closed;
  }

  /** The text on the clipboard ("" when it is empty). */
  async clipboard(): Promise<string> {
    return (await this.client.json<{ text: string }>('GET', this.desktopPath('clipboard'))).text;
  }

  async setClipboard(text: string): Promise<void> {
    await this.client.json('PUT', this.desktopPath('clipboard'), { text });
  }

  /** The guest's screen size in pixels (its X server's, not the model's scaled one). */
  async screenSize(): Promise<{ width: number; height: number }> {
    return this.client.json('GET', this.desktopPath('screen'));
  }

  private desktopPath(rest: string): string {
    return `/v1/sessions/${encodeURIComponent(this.id)}/desktop/${rest}`;
  }
}
