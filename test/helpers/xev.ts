import { setTimeout as sleep } from 'node:timers/promises';
import type { GuestTransport } from '../../src/transport/index.js';
import { guestSh, keysymToChar } from './guest.js';

/**
 * xev in the guest: an X client that prints every event it receives, full-screen and
 * focused, so a test can see exactly which button, key and position arrived.
 */
export async function startXev(guest: GuestTransport, width: number, height: number): Promise<void> {
  await guestSh(
    guest,
    `export DISPLAY=:99; setsid -f sh -c "exec stdbuf -oL xev -geometry ${width}x${height}+0+0 -event button -event keyboard -event mouse > /tmp/xev.log 2>&1"; ` +
      'xdotool search --sync --onlyvisible --name "^Event Tester$" windowactivate --sync windowfocus --sync >/dev/null',
  );
}

export async function clearXev(guest: GuestTransport): Promise<void> {
  await guestSh(guest, ': > /tmp/xev.log');
}

export async function waitForXev(guest: GuestTransport, done: (log: string) => boolean, tries = 50): Promise<string> {
  let log = '';
  for (let i = 0; i < tries; i++) {
    log = (await guestSh(guest, 'cat /tmp/xev.log')).text;
    if (done(log)) return log;
    await sleep(100);
  }
  return log;
}

export interface XEvent {
  type: string;
  root?: { x: number; y: number };
  button?: number;
  keysym?: number;
  keyName?: string;
  state?: number;
  time?: number;
}

/** Parses xev's multi-line event blocks. */
export function parseXev(log: string): XEvent[] {
  const events: XEvent[] = [];
  for (const block of log.split(/\n(?=\S)/)) {
    const head = /^(\w+) event/.exec(block);
    if (!head) continue;
    const event: XEvent = { type: head[1] as string };
    const root = /root:\((-?\d+),(-?\d+)\)/.exec(block);
    if (root) event.root = { x: Number(root[1]), y: Number(root[2]) };
    const button = /button (\d+)/.exec(block);
    if (button) event.button = Number(button[1]);
    const keysym = /keysym (0x[0-9a-f]+), (\w+)\)/.exec(block);
    if (keysym) {
      event.keysym = Number(keysym[1]);
      event.keyName = keysym[2];
    }
    const state = /state (0x[0-9a-f]+)/.exec(block);
    if (state) event.state = Number(state[1]);
    const time = /time (\d+)/.exec(block);
    if (time) event.time = Number(time[1]);
    events.push(event);
  }
  return events;
}

/** The text that KeyPress events carried, rebuilt from their keysyms. */
export function typedText(log: string): string {
  let text = '';
  for (const event of parseXev(log)) {
    if (event.type !== 'KeyPress' || event.keysym === undefined) continue;
    const ch = keysymToChar(event.keysym);
    if (ch !== undefined) text += ch;
  }
  return text;
}

/**
 * startXev with more time: under TCG the first new window takes seconds (xev starting,
 * openbox placing and focusing it), more than startXev's 20 s on a busy host.
 */
export async function startXevSlowly(guest: GuestTransport, width: number, height: number): Promise<void> {
  await guest.exec(
    `export DISPLAY=:99; setsid -f sh -c "exec stdbuf -oL xev -geometry ${width}x${height}+0+0 -event button -event keyboard -event mouse > /tmp/xev.log 2>&1"; ` +
      'xdotool search --sync --onlyvisible --name "^Event Tester$" windowactivate --sync windowfocus --sync >/dev/null',
    { timeoutMs: 90_000 },
  );
}
