/** What the e2b bench (e2b-desktop.ts) and its client process (e2b-client.ts) agree on. */

/** One command of the SDK's, the same in every layer's phase: the click of leftClick(). */
export const CLICK_COMMAND = 'xdotool click 1';

/** Where leftClick() goes on round i (the same points for the SDK, our API and the guest's own runs). */
export function clickPoint(i: number): [number, number] {
  return [200 + (i % 50) * 4, 300];
}

/** A screenshot file the bench leaves in the guest for the SDK's files.read alone. */
export const READ_FILE = '/tmp/sbx-bench-read.png';

/** The phases the client times, one call per sample. */
export const CLIENT_PHASES = [
  'sdk.screenshot',
  'sdk.leftClick',
  'sdk.run',
  'sdk.read',
  'connect.run',
  'processes.run',
  'api.screenshot',
  'api.leftClick',
  'floor.screenshot',
  'floor.leftClick',
  'floor.run',
] as const;
export type ClientPhase = (typeof CLIENT_PHASES)[number];

/** The client's first line on stdin (not its argv or environment: the key stays out of ps). */
export interface ClientSettings {
  url: string;
  apiKey: string;
  /** The floor's envd (e2b-floor-server.ts): the SDK's calls against a server that costs nothing. */
  floorUrl: string;
}
