/**
 * A live view revoked while its viewer's tunnel to the guest is still opening (x11vnc starting,
 * a slow guest): the revoke cuts the viewers it knows, and this one was not among them yet.
 * Checked again once the tunnel is up, it never relays (src/views/live-views.ts).
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import type { WebSocket } from 'ws';
import { LiveViews, type LiveViewSessions } from '../../src/views/live-views.js';
import { ViewTokens } from '../../src/views/view-tokens.js';
import type { GuestTransport } from '../../src/transport/index.js';

describe('a live view revoked (or expired) while its tunnel opens', () => {
  it('is closed (1008) once the tunnel is up, and its channel with it: nothing is relayed', async () => {
    const { closes, channel, views } = await openWhile((views, viewId) => views.revoke('sess000001', viewId));
    assert.deepEqual(closes, [[1008, 'this live view was revoked']]);
    assert.equal(channel.closed, true, "the tunnel's channel is closed");
    assert.equal(views.viewersOf('sess000001'), 0, 'its viewer slot is given back');
  });

  it('expired meanwhile: closed (1008) saying so, not "revoked"', async () => {
    const { closes, channel } = await openWhile(() => new Promise((resolve) => setTimeout(resolve, 1_100)), 1);
    assert.deepEqual(closes, [[1008, 'this live-view link has expired: ask for a new one']]);
    assert.equal(channel.closed, true, "the tunnel's channel is closed");
  });
});

/** A view connected while its tunnel opens; `meanwhile` runs before the tunnel is up. */
async function openWhile(meanwhile: (views: LiveViews, viewId: string) => unknown, ttlSeconds?: number) {
  let openTunnel: (channel: unknown) => void = () => undefined;
  const channel = Object.assign(new EventEmitter(), { closed: false, close: () => void (channel.closed = true), write: () => true });
  const connection = {
    forwardToGuestLoopback: () => new Promise((resolve) => (openTunnel = resolve)),
  } as unknown as GuestTransport;
  const sessions: LiveViewSessions = {
    connection: () => connection,
    displayOf: () => 99,
    displayStartedBySession: () => false,
    attachment: async <T>(_id: string, _name: string, make: (ctx: never) => Promise<T>) => make({ cleanup: { push: async () => undefined } } as never),
    tenantOf: () => 't1',
    setControl: () => undefined,
  } as unknown as LiveViewSessions;
  const settings = { defaultTtlSeconds: 600, maxTtlSeconds: 3600, maxViewersPerSession: 4, maxViewersPerTenant: 8, takeoverGraceMs: 1000, viewer: {} };
  const hooks = { viewerConnected: () => assert.fail('the revoked view was relayed'), viewerDisconnected: () => undefined, bytes: () => undefined };
  const views = new LiveViews(new ViewTokens(new Database(':memory:')), sessions, settings as never, hooks, pino({ level: 'silent' }));
  const { grant } = await views.create('sess000001', 't1', 'control', ttlSeconds);
  const closes: Array<[number, string]> = [];
  const ws = Object.assign(new EventEmitter(), { OPEN: 1, readyState: 1, close: (code: number, reason: string) => closes.push([code, reason]) });
  const connected = views.connect(grant, ws as unknown as WebSocket, views.admit(grant));
  await new Promise((resolve) => setImmediate(resolve));
  await meanwhile(views, grant.viewId); // while the tunnel opens
  openTunnel(channel);
  await connected;
  return { closes, channel, views };
}
