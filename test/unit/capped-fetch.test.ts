import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { cappedFetch } from '../../src/runs/capped-fetch.js';

// A Messages API endpoint that never stops sending (a hostile or broken ANTHROPIC_BASE_URL):
// the SDK reads a reply whole before parsing it, so without the cap the orchestrator's memory
// grows for as long as the endpoint sends.
const MiB = 1024 * 1024;
let server: Server;
let url: string;
let floodSent = 0;
let floodClosed: Promise<void> = Promise.resolve();

before(async () => {
  server = createServer((req, res) => {
    req.resume();
    if (req.url?.startsWith('/declared')) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(64 * MiB) });
      res.write('{"id":"');
      return;
    }
    if (req.url?.startsWith('/small')) {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      return;
    }
    // Chunked: 1 MiB of a JSON string at a time for as long as it is read, up to 256 MiB (so
    // that without the cap the test ends, with a Message the SDK parses, rather than the host's memory).
    res.writeHead(200, { 'content-type': 'application/json', 'request-id': 'req_flood' });
    res.write('{"id":"msg_flood","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"');
    const chunk = Buffer.alloc(MiB, 'a');
    floodClosed = new Promise((resolve) => res.once('close', () => resolve()));
    const more = () => {
      while (!res.destroyed) {
        if (floodSent >= 256 * MiB) {
          res.end('"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}');
          return;
        }
        floodSent += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', more);
      }
    };
    more();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

test('an endless reply fails the SDK call at the cap, and the endpoint is no longer read', async () => {
  const client = new Anthropic({ apiKey: 'sk-test', baseURL: url, maxRetries: 0, fetch: cappedFetch(4 * MiB) });
  const rss = process.memoryUsage().rss;
  const began = performance.now();
  await assert.rejects(
    client.beta.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
    /larger than 4194304 bytes/,
  );
  const grew = (process.memoryUsage().rss - rss) / MiB;
  await floodClosed;
  console.log(`endless reply refused after ${(performance.now() - began).toFixed(0)} ms, ${floodSent / MiB} MiB sent, RSS +${grew.toFixed(0)} MiB`);
  assert.ok(grew < 64, `RSS grew by ${grew} MiB`);
  // The socket's buffers take what the sender wrote before the cancel reached it: not much more than the cap.
  assert.ok(floodSent < 32 * MiB, `${floodSent / MiB} MiB were sent`);
});

test('a declared length past the cap is refused before its body is read', async () => {
  await assert.rejects(cappedFetch(MiB)(`${url}/declared`), /larger than 1048576 bytes/);
});

test('a reply within the cap is read as it was sent', async () => {
  const res = await cappedFetch(MiB)(`${url}/small`);
  assert.deepEqual(await res.json(), { ok: true });
});
