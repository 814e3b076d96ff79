import assert from 'node:assert/strict';
import type { GuestTransport } from '../../src/transport/index.js';
import { guestSh, pngSize } from './guest.js';
import type { TestOrchestrator } from './orchestrator.js';
import { typedText, waitForXev } from './xev.js';

/**
 * The checks every runtime's end-to-end test makes of a ready 800x600 session: the same
 * user-visible behaviour whatever runs the sandbox. The caller starts xev in the guest.
 */
export function act(orch: TestOrchestrator, id: string, payload: Record<string, unknown>) {
  return orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/actions`, payload });
}

export async function assertScreenshotSize(orch: TestOrchestrator, id: string, size: { width: number; height: number }): Promise<void> {
  const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
  assert.equal(res.statusCode, 200);
  assert.equal(res.headers['content-type'], 'image/png');
  assert.deepEqual(pngSize(res.rawPayload), size);
}

/** A left click at (300, 250) reaches xev at that root position, as button 1. */
export async function assertClickArrives(orch: TestOrchestrator, id: string, guest: GuestTransport): Promise<void> {
  const res = await act(orch, id, { action: 'left_click', coordinate: [300, 250] });
  assert.equal(res.statusCode, 200, res.body);
  const events = await waitForXev(guest, (log) => /ButtonPress event/.test(log));
  const press = /ButtonPress event[^]*?root:\((\d+),(\d+)\)[^]*?button (\d+)/.exec(events);
  assert.ok(press, events);
  assert.deepEqual([press[1], press[2], press[3]], ['300', '250', '1']);
}

/** Hostile-looking text is typed literally (every keysym arrives) and nothing runs. */
export async function assertTypesLiterally(orch: TestOrchestrator, id: string, guest: GuestTransport, tries?: number): Promise<void> {
  const text = 'Hello, wörld! $(id) `touch /tmp/pwned`; \'"';
  await guestSh(guest, ': > /tmp/xev.log');
  const res = await act(orch, id, { action: 'type', text });
  assert.equal(res.statusCode, 200, res.body);
  const typed = await waitForXev(guest, (log) => typedText(log) === text, tries);
  assert.equal(typedText(typed), text);
  assert.equal((await guestSh(guest, 'test -e /tmp/pwned && echo yes || echo no')).text.trim(), 'no');
}
