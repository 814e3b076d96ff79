import type { ComputerToolInput, Sandbox } from '../client/index.js';
import { parseAction } from '../computer/actions.js';
import { INPUT_COMMAND, requestLine } from '../computer/input-channel.js';
import { inputPlan, isPointerOrKeyAction } from '../computer/input-requests.js';
import { Scaler } from '../computer/scaling.js';
import type { GuestTransport } from '../transport/index.js';
import { timeInputInGuest } from './baselines.js';
import { summarize, timeIt, type Summary } from './stats.js';

/** Harmless samples of each pointer and key action (clicks land on the empty desktop). */
const ACTION_SAMPLES: ComputerToolInput[] = [
  { action: 'mouse_move', coordinate: [500, 300] },
  { action: 'left_click', coordinate: [900, 700] },
  { action: 'right_click', coordinate: [900, 700] },
  { action: 'middle_click', coordinate: [900, 700] },
  { action: 'double_click', coordinate: [900, 700] },
  { action: 'triple_click', coordinate: [900, 700] },
  { action: 'scroll', scroll_direction: 'down', scroll_amount: 1, coordinate: [900, 700] },
  { action: 'key', text: 'shift' },
  { action: 'left_mouse_down' },
  { action: 'left_mouse_up' },
];

export interface ActionFigures {
  api: Summary;
  /** The very same input requests written to a persistent sbx-input in the guest. */
  guest: Summary;
}

/** Every pointer and key action over the API against the same requests in the guest (1024x768). */
export async function measureActions(sandbox: Sandbox, direct: GuestTransport, display: number, n: number): Promise<Record<string, ActionFigures>> {
  const figures: Record<string, ActionFigures> = {};
  for (const input of ACTION_SAMPLES) {
    const api = summarize(await timeIt(n, () => sandbox.action(input)));
    const action = parseAction(input, new Scaler({ width: 1024, height: 768 }, { width: 1024, height: 768 }));
    const plan = isPointerOrKeyAction(action) ? inputPlan(action) : { requests: [] };
    const requests = [...plan.requests, ...(plan.hold?.release ?? [])].map(requestLine).join('');
    const guest = summarize(await timeInputInGuest(direct, display, INPUT_COMMAND, requests, n));
    figures[input.action] = { api, guest };
  }
  return figures;
}
