import { text } from 'node:stream/consumers';
import { Command, InvalidArgumentError } from 'commander';
import type { Sandbox, SandboxClient } from '../client/index.js';

function windowId(value: string): number {
  if (!/^[1-9][0-9]{0,9}$/.test(value)) throw new InvalidArgumentError('must be a window id from `sbx desktop windows`');
  return Number(value);
}

/**
 * `sbx desktop open|launch|windows|focus|close|clipboard|screen <id> ...`: the desktop
 * actions of a session, through the HTTP API (the client's Sandbox methods).
 */
export function desktopCommand(client: () => SandboxClient): Command {
  const desktop = new Command('desktop').description("a session's desktop: open, launch, windows, clipboard, screen size");
  const sandbox = (id: string): Promise<Sandbox> => client().connect(id);

  desktop
    .command('open <id> <target>')
    .description('open a URL (http, https, file, mailto) or an absolute path in its default application')
    .action(async (id: string, target: string) => {
      await (await sandbox(id)).open(target);
    });

  desktop
    .command('launch <id> <app>')
    .description('start an application by its desktop-file id, e.g. debian-xterm')
    .action(async (id: string, app: string) => {
      console.log((await (await sandbox(id)).launch(app)).file);
    });

  desktop
    .command('windows <id>')
    .description('list the top-level windows: id, geometry, focus, class and title')
    .option('--json', 'print them as JSON')
    .action(async (id: string, opts: { json?: boolean }) => {
      const windows = await (await sandbox(id)).windows();
      if (opts.json) return console.log(JSON.stringify(windows, null, 2));
      for (const w of windows) {
        console.log(
          `${String(w.id).padEnd(10)} ${`${w.width}x${w.height}+${w.x}+${w.y}`.padEnd(20)} ${w.focused ? '*' : ' '} ${w.app.padEnd(12)} ${JSON.stringify(w.title)}`,
        );
      }
    });

  desktop
    .command('focus <id> <window>')
    .description('make a window the active one')
    .action(async (id: string, window: string) => {
      const focused = await (await sandbox(id)).focusWindow(windowId(window));
      if (!focused) console.error('sbx: the window manager did not make it active within 2 s');
    });

  desktop
    .command('close <id> <window>')
    .description('ask a window to close')
    .action(async (id: string, window: string) => {
      const closed = await (await sandbox(id)).closeWindow(windowId(window));
      if (!closed) console.error('sbx: the window is still open (it may be asking to save)');
    });

  desktop
    .command('clipboard <id> [text]')
    .description('print the clipboard; with text (or --set reading stdin), set it')
    .option('--set', 'set the clipboard to standard input')
    .action(async (id: string, value: string | undefined, opts: { set?: boolean }) => {
      const box = await sandbox(id);
      if (value !== undefined) return box.setClipboard(value);
      if (opts.set) return box.setClipboard(await text(process.stdin));
      process.stdout.write(await box.clipboard());
    });

  desktop
    .command('screen <id>')
    .description("print the guest's screen size (WIDTHxHEIGHT)")
    .action(async (id: string) => {
      const { width, height } = await (await sandbox(id)).screenSize();
      console.log(`${width}x${height}`);
    });

  return desktop;
}
