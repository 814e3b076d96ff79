import type { GuestTransport } from '../../src/transport/index.js';

/**
 * A small web server for the guest, in python3's standard library (every template has
 * python3): what the guest-port tests reach through the orchestrator. Every request it gets
 * is appended to /tmp/seen.log (to prove a refused request never reached it).
 *   GET  /headers    the request's headers as JSON      POST /echo   the body back, streamed
 *   GET  /sse        three events 300 ms apart           GET  /endless  bytes until the client goes
 *   GET  /sleep      answers after 2 s                   GET  /bytes?n=N  N bytes
 *   GET  /ws         a WebSocket echo (text and binary)  GET  /wsflood  a WebSocket that only sends
 * anything else: a static file under the current directory.
 */
export const GUEST_WEB_SERVER = String.raw`
import base64, hashlib, json, os, socketserver, struct, sys, time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

class H(SimpleHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a):
        pass
    def seen(self):
        with open('/tmp/seen.log', 'a') as f:
            f.write(self.command + ' ' + self.path + '\n')
    def head(self, code, ctype, length=None, extra=()):
        self.send_response(code)
        self.send_header('content-type', ctype)
        if length is not None:
            self.send_header('content-length', str(length))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
    def do_GET(self):
        self.seen()
        p = self.path.split('?')[0]
        if p == '/headers':
            body = json.dumps({k.lower(): v for k, v in self.headers.items()} | {':path': self.path}).encode()
            self.head(200, 'application/json', len(body)); self.wfile.write(body); return
        if p == '/sse':
            self.head(200, 'text/event-stream', None, [('cache-control', 'no-cache'), ('connection', 'close')])
            for i in range(3):
                self.wfile.write(('data: event %d\n\n' % i).encode()); self.wfile.flush(); time.sleep(0.3)
            self.close_connection = True; return
        if p == '/endless':
            self.head(200, 'application/octet-stream', None, [('connection', 'close')])
            chunk = b'x' * 65536
            try:
                while True: self.wfile.write(chunk)
            except Exception: pass
            self.close_connection = True; return
        if p == '/sleep':
            time.sleep(2); self.head(200, "text/plain", 5); self.wfile.write(b'slept'); return
        if p == '/bytes':
            n = int(self.path.split('n=')[1]); self.head(200, 'application/octet-stream', n)
            chunk = b'y' * 65536
            while n > 0:
                self.wfile.write(chunk[:min(n, 65536)]); n -= 65536
            return
        if p in ('/ws', '/wsflood'):
            return self.websocket(p == '/wsflood')
        return super().do_GET()
    def do_POST(self):
        self.seen()
        n = int(self.headers.get('content-length', '0'))
        self.head(200, 'application/octet-stream', n)
        while n > 0:
            b = self.rfile.read(min(n, 65536))
            if not b: break
            self.wfile.write(b); n -= len(b)
    do_PUT = do_POST
    def do_DELETE(self):
        self.seen(); self.head(200, 'text/plain', 7); self.wfile.write(b'deleted')
    def websocket(self, flood):
        key = self.headers.get('sec-websocket-key', '')
        accept = base64.b64encode(hashlib.sha1((key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').encode()).digest()).decode()
        self.send_response(101); self.send_header('upgrade', 'websocket'); self.send_header('connection', 'Upgrade')
        self.send_header('sec-websocket-accept', accept); self.end_headers(); self.wfile.flush()
        self.close_connection = True
        def send(op, data):
            n = len(data)
            hdr = bytes([0x80 | op]) + (bytes([n]) if n < 126 else (bytes([126]) + struct.pack('>H', n) if n < 65536 else bytes([127]) + struct.pack('>Q', n)))
            self.wfile.write(hdr + data); self.wfile.flush()
        if flood:
            data = b'z' * 60000
            try:
                while True: send(2, data)
            except Exception: return
        while True:
            h = self.rfile.read(2)
            if len(h) < 2: return
            op, n = h[0] & 15, h[1] & 127
            if n == 126: n = struct.unpack('>H', self.rfile.read(2))[0]
            elif n == 127: n = struct.unpack('>Q', self.rfile.read(8))[0]
            mask = self.rfile.read(4) if h[1] & 128 else b'\0\0\0\0'
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if op == 8: send(8, data[:2]); return
            if op == 9: send(10, data); continue
            send(op, data)

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
`;

/** Starts the server on `port` in `dir` (made, with the given files) and waits until it answers. */
export async function startGuestWebServer(conn: GuestTransport, port: number, dir = '/tmp/www', files: Record<string, string> = {}): Promise<void> {
  const writes = Object.entries(files)
    .map(([name, text]) => `printf '%s' '${Buffer.from(text).toString('base64')}' | base64 -d > ${dir}/${name}`)
    .join(' && ');
  await conn.exec(`mkdir -p ${dir} && cat > /tmp/guest-web.py${writes ? ` && ${writes}` : ''}`, { stdin: GUEST_WEB_SERVER });
  await spawnUntilListening(conn, `cd ${dir} && exec python3 /tmp/guest-web.py ${port}`, port, 'the guest web server');
}

/** Starts `command` in the guest (its output read and dropped) and waits until something listens on `port`. */
async function spawnUntilListening(conn: GuestTransport, command: string, port: number, what: string): Promise<void> {
  const server = await conn.spawn(command);
  server.on('data', () => undefined);
  server.stderr.on('data', () => undefined);
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const probe = await conn.exec(`python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port}), 1)" && echo up`).catch(() => undefined);
    if (probe?.stdout.toString().includes('up')) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} did not listen on ${port}`);
}

/**
 * Servers that answer with what identifies their TCP connection, "<client port> <requests on
 * this connection> <method> <path>[ <body>]" (the client port as the guest sees it: one per
 * connection sshd makes), on four ports from `base`:
 *   base      HTTP/1.1, kept alive (GET /close...: answered with Connection: close;
 *             GET /close-hold...: the same, then the connection held open and written on
 *             after 1 s, GET /held: whether each such write found it closed;
 *             GET /open: the client ports of the connections open now, as JSON)
 *   base + 1  HTTP/1.0, no length: every answer ends with its connection
 *   base + 2  HTTP/1.1, but a connection that brings a second request is closed unanswered
 *   base + 3  HTTP/1.1, an idle connection closed after 0.3 s
 */
export const GUEST_CONNECTION_SERVERS = String.raw`
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPEN = set()
HELD = {}

class Base(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    disable_nagle_algorithm = True
    with_length = True
    def log_message(self, *a):
        pass
    def setup(self):
        super().setup(); self.served = 0; OPEN.add(self.client_address[1])
    def finish(self):
        OPEN.discard(self.client_address[1]); super().finish()
    def reply(self, text):
        self.served += 1
        if self.path == '/open':
            text = json.dumps(sorted(OPEN))
        elif self.path == '/held':
            text = json.dumps(HELD)
        else:
            text = '%d %d %s %s' % (self.client_address[1], self.served, self.command, text)
        body = text.encode()
        self.send_response(200); self.send_header('content-type', 'text/plain')
        if self.with_length:
            self.send_header('content-length', str(len(body)))
        if self.path.startswith('/close'):
            self.send_header('connection', 'close')
        self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self.reply(self.path)
        if self.path.startswith('/close-hold'):
            # Connection: close said, but held open: is the other end closed all the same?
            time.sleep(1.0)
            try:
                self.wfile.write(b'x'); time.sleep(0.2); self.wfile.write(b'x'); HELD[self.path] = 'open'
            except OSError:
                HELD[self.path] = 'closed'
    do_DELETE = do_GET
    def do_POST(self):
        data = self.rfile.read(int(self.headers.get('content-length', '0')))
        self.reply(self.path + ' ' + data.decode())

class Http10(Base):
    protocol_version = 'HTTP/1.0'
    with_length = False

class ClosesReused(Base):
    def handle_one_request(self):
        if self.served >= 1:
            self.rfile.readline(); self.close_connection = True; return
        super().handle_one_request()

class ClosesIdle(Base):
    timeout = 0.3

ThreadingHTTPServer.daemon_threads = True
base = int(sys.argv[1])
for i, handler in enumerate([Base, Http10, ClosesReused, ClosesIdle]):
    threading.Thread(target=ThreadingHTTPServer(('127.0.0.1', base + i), handler).serve_forever, daemon=True).start()
while True:
    time.sleep(3600)
`;

/** Starts GUEST_CONNECTION_SERVERS on `base` to `base + 3` and waits until the last listens. */
export async function startGuestConnectionServers(conn: GuestTransport, base: number): Promise<void> {
  await conn.exec('cat > /tmp/guest-conn-web.py', { stdin: GUEST_CONNECTION_SERVERS });
  await spawnUntilListening(conn, `exec python3 /tmp/guest-conn-web.py ${base}`, base + 3, 'the guest connection servers');
}
