import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The e2b bench's floor: an envd that costs nothing. It answers what the SDK's screenshot(),
 * leftClick() and commands.run() ask, at once and without a guest: a `Start` stream is its
 * start event, its end (exit 0) and the end-of-stream message in one write; `GET /files` a
 * body of the screenshot's size; `Filesystem/Remove` an empty message. The SDK's calls against
 * it are what the SDK's own client costs on this host (its fetch, Connect's envelopes, its
 * headers), with any server: the part of a call that is neither the guest's nor ours.
 */
export class E2bFloorServer {
  private readonly server = http.createServer((req, res) => this.answer(req, res));
  /** The body `GET /files` answers (set to the bench's screenshot size). */
  fileBody = Buffer.alloc(0);

  async listen(): Promise<string> {
    this.server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private answer(req: http.IncomingMessage, res: http.ServerResponse): void {
    req.resume();
    req.once('end', () => {
      const path = (req.url ?? '').split('?')[0];
      if (req.method === 'POST' && path === '/process.Process/Start') {
        res.writeHead(200, { 'content-type': 'application/connect+json' });
        res.end(
          Buffer.concat([
            envelope(0, { event: { start: { pid: 1 } } }),
            envelope(0, { event: { end: { exitCode: 0, exited: true, status: 'exit status 0' } } }),
            envelope(2, {}),
          ]),
        );
      } else if (req.method === 'GET' && path === '/files') {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': this.fileBody.length });
        res.end(this.fileBody);
      } else if (req.method === 'POST' && path === '/filesystem.Filesystem/Remove') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      } else {
        res.writeHead(404).end();
      }
    });
  }
}

/** One Connect envelope of a JSON message (flags 2: the end of the stream). */
function envelope(flags: number, message: unknown): Buffer {
  const payload = Buffer.from(JSON.stringify(message));
  const out = Buffer.alloc(5 + payload.length);
  out[0] = flags;
  out.writeUInt32BE(payload.length, 1);
  payload.copy(out, 5);
  return out;
}
