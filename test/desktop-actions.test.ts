import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ResourceNames } from '../src/network/names.js';
import type { GuestTransport } from '../src/transport/index.js';
import { NotFoundError, SandboxClient, type DesktopWindow, type Sandbox } from '../src/client/index.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { runCli, startServe, type ServeProcess } from './helpers/serve.js';

/**
 * Issue 14, desktop actions: against a real `sbx serve` and a real container sandbox, through
 * the client SDK (and the CLI for a few), each action does what it says, checked in the
 * guest with its own tools (xdotool, xprop, xclip) over a connection of the test's own.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const HOME = '/home/user';
const ARGV_LOG = `${HOME}/argv.log`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(what: string, probe: () => Promise<T | undefined>, tries = 50): Promise<T> {
  for (let i = 0; i < tries; i++) {
    const found = await probe();
    if (found !== undefined) return found;
    await sleep(200);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A handler for URLs and for text files that records its argv, NUL-separated, one run per file. */
const RECORDER = `#!/bin/sh\nprintf '%s\\0' "$@" > ${ARGV_LOG}.tmp && mv ${ARGV_LOG}.tmp ${ARGV_LOG}\n`;
const desktopFile = (name: string, exec: string, types: string) =>
  `[Desktop Entry]\nType=Application\nName=${name}\nExec=${HOME}/record-argv ${exec}\nMimeType=${types}\nNoDisplay=true\n`;
const MIMEAPPS = [
  '[Default Applications]',
  'x-scheme-handler/https=sbx-record-url.desktop',
  'x-scheme-handler/http=sbx-record-url.desktop',
  'x-scheme-handler/mailto=sbx-record-url.desktop',
  'text/plain=sbx-record-file.desktop',
  '',
].join('\n');

describe('desktop actions: open, launch, windows, focus, close, clipboard, screen', () => {
  let stateDir: string;
  let serve: ServeProcess;
  let sandbox: Sandbox;
  let guest: GuestTransport;

  const x = async (script: string) => {
    const result = await guestSh(guest, `export DISPLAY=:99 LC_ALL=C.UTF-8; ${script}`);
    assert.equal(result.exitCode, 0, `${script}: ${result.stderr.toString()}`);
    return result.text;
  };
  /** Starts an xterm with a known title, detached from the test's channel. */
  const startXterm = (title: string) => x(`setsid xterm -T '${title}' -e sleep 600 </dev/null >/dev/null 2>&1 &`);
  const windowTitled = (title: string) => until(`a window titled ${title}`, async () => (await sandbox.windows()).find((w) => w.title === title));
  const argvRecorded = () =>
    until('the handler to run', async () => {
      const result = await guest.exec(`cat ${ARGV_LOG} 2>/dev/null`);
      return result.exitCode === 0 ? result.stdout.toString('utf8').split('\0').slice(0, -1) : undefined;
    });

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-desktop-actions-'));
    serve = await startServe(stateDir, 19_500 + Math.floor(Math.random() * 400));
    sandbox = await new SandboxClient({ baseUrl: serve.url }).create({ width: 1024, height: 768 });
    guest = await connectToGuest(stateDir, sandbox.id, await guestAddress(NAMES, sandbox.id));
  });

  after(async () => {
    guest?.close();
    if (sandbox) await sandbox.destroy().catch(() => undefined);
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('screen: the size the guest X server reports', async () => {
    assert.deepEqual(await sandbox.screenSize(), { width: 1024, height: 768 });
    assert.match(await x('xdpyinfo | grep dimensions'), /1024x768 pixels/);
    const cli = await runCli(['desktop', 'screen', sandbox.id], serve.url);
    assert.equal(cli.stdout.trim(), '1024x768', cli.stderr);
  });

  it('the routes are in the OpenAPI document', async () => {
    const spec = (await (await fetch(`${serve.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
    for (const [route, method] of [
      ['open', 'post'],
      ['launch', 'post'],
      ['windows', 'get'],
      ['windows/{windowId}/focus', 'post'],
      ['windows/{windowId}/close', 'post'],
      ['clipboard', 'get'],
      ['clipboard', 'put'],
      ['screen', 'get'],
    ]) {
      assert.ok(spec.paths[`/v1/sessions/{id}/desktop/${route}`]?.[method as string], `${method} ${route}`);
    }
  });

  it('windows: lists an xterm the test started, with its title, class, id and geometry as X has them', async () => {
    // xterm's own title is Latin-1 (WM_NAME); a UTF-8 title is set as desktops do, in _NET_WM_NAME.
    await startXterm('sbx window plain');
    const plain = await windowTitled('sbx window plain');
    const title = 'sbx window ünïcødé ✓ 日本';
    await x(`xdotool set_window --name '${title}' ${plain.id}`);
    const found = await windowTitled(title);
    assert.equal(found.id, plain.id);
    assert.equal(found.app, 'XTerm');
    assert.equal(found.instance, 'xterm');
    const ids = (await x(`xdotool search --name '^sbx window '`)).trim().split('\n').map(Number);
    assert.ok(ids.includes(found.id), `xdotool finds ${ids.join(',')}, the list says ${found.id}`);
    const geometry = await x(`xdotool getwindowgeometry --shell ${found.id}`);
    assert.match(geometry, new RegExp(`WIDTH=${found.width}\\n`));
    assert.match(geometry, new RegExp(`HEIGHT=${found.height}\\n`));
    assert.ok(found.width > 0 && found.height > 0 && found.x >= 0 && found.y >= 0, JSON.stringify(found));
    const cli = await runCli(['desktop', 'windows', sandbox.id, '--json'], serve.url);
    assert.ok(
      (JSON.parse(cli.stdout) as DesktopWindow[]).some((w) => w.id === found.id),
      cli.stdout,
    );
  });

  it('focus: makes the window the active one (_NET_ACTIVE_WINDOW), and another after it', async () => {
    await startXterm('sbx focus one');
    await startXterm('sbx focus two');
    const one = await windowTitled('sbx focus one');
    const two = await windowTitled('sbx focus two');
    const active = async () => Number.parseInt(/window id # (0x[0-9a-f]+)/.exec(await x('xprop -root _NET_ACTIVE_WINDOW'))?.[1] ?? '0', 16);
    for (const target of [one, two, one]) {
      assert.equal(await sandbox.focusWindow(target.id), true);
      assert.equal(await active(), target.id);
      const listed = await sandbox.windows();
      assert.deepEqual(
        listed.filter((w) => w.focused).map((w) => w.id),
        [target.id],
      );
    }
  });

  it('close: the window goes away, and its process with it; an unknown window is a 404', async () => {
    const title = 'sbx close me';
    await startXterm(title);
    const found = await windowTitled(title);
    assert.equal(await sandbox.closeWindow(found.id), true);
    assert.ok(!(await sandbox.windows()).some((w) => w.id === found.id));
    const search = await guestSh(guest, `DISPLAY=:99 xdotool search --name '^${title}$'`);
    assert.equal(search.text.trim(), '', 'xdotool still finds it');
    await until('the xterm to exit', async () => ((await guestSh(guest, `pgrep -f '${title}'`)).exitCode === 1 ? true : undefined));
    await assert.rejects(sandbox.closeWindow(found.id), (err: unknown) => err instanceof NotFoundError && err.code === 'window_not_found');
    await assert.rejects(sandbox.focusWindow(found.id), (err: unknown) => err instanceof NotFoundError && err.code === 'window_not_found');
  });

  it('clipboard: set through the API is read in the guest with xclip, and the other way round, UTF-8 kept', async () => {
    const text = 'héllo wörld ✓ 日本語 Ελληνικά 🎉\nsecond line\ttab';
    await sandbox.setClipboard(text);
    assert.equal(await x('xclip -selection clipboard -o'), text);
    const back = 'Ωμέγα — 中文 — emoji 🦊 — "quotes" $(not run)';
    const upload = await sandbox.upload(`${HOME}/clip.txt`, back);
    assert.equal(upload.size, Buffer.byteLength(back));
    await x(`xclip -selection clipboard -i ${HOME}/clip.txt >/dev/null 2>&1`);
    assert.equal(await until('the clipboard to change', async () => ((await sandbox.clipboard()) === back ? back : undefined)), back);
    const cli = await runCli(['desktop', 'clipboard', sandbox.id], serve.url);
    assert.equal(cli.stdout, back, cli.stderr);
  });

  it('launch: debian-xterm opens a new XTerm window; an unknown app is a 404', async () => {
    const xterms = async () => (await sandbox.windows()).filter((w) => w.app === 'XTerm').length;
    const before = await xterms();
    const launched = await sandbox.launch('debian-xterm');
    assert.equal(launched.file, '/usr/share/applications/debian-xterm.desktop');
    await until('a new xterm window', async () => ((await xterms()) > before ? true : undefined));
    await assert.rejects(sandbox.launch('no-such-app'), (err: unknown) => err instanceof NotFoundError && err.code === 'app_not_found');
  });

  it('open: a file and a URL reach the handler registered for them, each as ONE argument, verbatim', async () => {
    await sandbox.upload(`${HOME}/record-argv`, RECORDER, { mode: 0o755 });
    await sandbox
      .upload(
        `${HOME}/.local/share/applications/sbx-record-url.desktop`,
        desktopFile('Record URL', '%u', 'x-scheme-handler/https;x-scheme-handler/http;x-scheme-handler/mailto;'),
      )
      .catch(async () => {
        await x(`mkdir -p ${HOME}/.local/share/applications ${HOME}/.config`);
        return sandbox.upload(
          `${HOME}/.local/share/applications/sbx-record-url.desktop`,
          desktopFile('Record URL', '%u', 'x-scheme-handler/https;x-scheme-handler/http;x-scheme-handler/mailto;'),
        );
      });
    await sandbox.upload(`${HOME}/.local/share/applications/sbx-record-file.desktop`, desktopFile('Record file', '%f', 'text/plain;'));
    await x(`mkdir -p ${HOME}/.config`);
    await sandbox.upload(`${HOME}/.config/mimeapps.list`, MIMEAPPS);

    const file = `${HOME}/a dir/it's a "file" $(touch pwned); -e --help ü.txt`;
    await x(`mkdir -p '${HOME}/a dir'`);
    await sandbox.upload(file, 'hello');
    const url = `https://example.test/path?q=1&r=$(touch%20${HOME}/pwned);'x'|id#--help`;
    for (const target of [file, url, 'mailto:someone@example.test?subject=-e']) {
      await guest.exec(`rm -f ${ARGV_LOG}`);
      await sandbox.open(target);
      assert.deepEqual(await argvRecorded(), [target], `the handler's argv for ${target}`);
    }
    assert.equal((await guestSh(guest, `test -e ${HOME}/pwned`)).exitCode, 1, 'nothing ran the target as code');
    await assert.rejects(sandbox.open(`${HOME}/no such file.txt`), (err: unknown) => (err as { code?: string }).code === 'desktop_action_failed');
  });
});
