/**
 * Endpoints as dialers (src/transport/endpoint.ts, issue 23): labels, and Firecracker's
 * hybrid vsock handshake against a stand-in multiplexer on a Unix socket. A guest (or
 * multiplexer) that answers garbage, too much, or nothing fails that dial only, within its
 * bound and with the reason; bytes that follow the OK line belong to SSH.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { existsSync } from 'node:fs';
import { qemuSettingsFromEnv } from '../../src/runtimes/qemu/settings.js';
import { VHOST_VSOCK_DEVICE, vsockFallbackReason } from '../../src/runtimes/qemu/vsock-fallback.js';
import { DialError, dialHybridVsock, endpointLabel } from '../../src/transport/endpoint.js';
import { transportChoiceFromEnv } from '../../src/transport/settings.js';

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-unit-endpoint-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

let servers = 0;
/** A stand-in for Firecracker's vsock multiplexer: `answer` decides what a CONNECT gets. */
async function multiplexer(answer: (line: string, socket: net.Socket) => void): Promise<{ path: string; lines: string[]; close: () => Promise<void> }> {
  const socketPath = path.join(dir, `vsock-${++servers}.sock`);
  const lines: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    let got = '';
    socket.on('data', (chunk) => {
      got += chunk.toString('latin1');
      const newline = got.indexOf('\n');
      if (newline < 0) return;
      const line = got.slice(0, newline);
      got = got.slice(newline + 1);
      lines.push(line);
      answer(line, socket);
    });
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    path: socketPath,
    lines,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The dialed stream comes paused, as ssh2 takes it (it resumes it once connected). */
function readSome(stream: NodeJS.ReadableStream): Promise<string> {
  const first = new Promise<string>((resolve) => stream.once('data', (chunk: Buffer) => resolve(chunk.toString('latin1'))));
  stream.resume();
  return first;
}

describe('unit: transport endpoints', () => {
  it('labels every kind of endpoint, a bare {host, port} being TCP', () => {
    assert.equal(endpointLabel({ host: '10.0.0.2', port: 22 }), '10.0.0.2:22');
    assert.equal(endpointLabel({ transport: 'unix', path: '/s/ssh.sock' }), 'unix:/s/ssh.sock');
    assert.equal(endpointLabel({ transport: 'hybrid-vsock', path: '/j/v.sock', port: 22 }), 'vsock:/j/v.sock:22');
    assert.equal(endpointLabel({ transport: 'vsock', cid: 3, port: 22 }), 'vsock:3:22');
  });

  it("hybrid vsock: CONNECT <port>, OK <n>; what follows the OK line (the banner) is SSH's", async () => {
    const mux = await multiplexer((_line, socket) => socket.write('OK 1073741824\nSSH-2.0-OpenSSH_9.2\r\n'));
    try {
      const stream = await dialHybridVsock({ transport: 'hybrid-vsock', path: mux.path, port: 22 }, 2_000);
      assert.deepEqual(mux.lines, ['CONNECT 22']);
      assert.equal(await readSome(stream), 'SSH-2.0-OpenSSH_9.2\r\n', 'the banner sent with the OK line is not lost');
      stream.destroy();
    } finally {
      await mux.close();
    }
  });

  it('hybrid vsock: garbage, an overlong line, silence and a closed socket each fail that dial only, in bounded time, saying why', async () => {
    const cases: Array<[string, (line: string, socket: net.Socket) => void, RegExp]> = [
      ['garbage', (_l, s) => s.write('HELLO THERE\n'), /unexpected answer to CONNECT: "HELLO THERE"/],
      ['a refusal', (_l, s) => s.end('ERR no listener\n'), /unexpected answer to CONNECT: "ERR no listener"/],
      ['an endless line', (_l, s) => s.write(Buffer.alloc(100_000, 0x41)), /longer than 64 bytes without a newline/],
      ['silence', () => undefined, /no answer to CONNECT within 300 ms/],
      ['a hang-up', (_l, s) => s.destroy(), /closed during the CONNECT handshake/],
    ];
    for (const [what, answer, reason] of cases) {
      const mux = await multiplexer(answer);
      const started = performance.now();
      try {
        await assert.rejects(dialHybridVsock({ transport: 'hybrid-vsock', path: mux.path, port: 22 }, 300), (err: Error) => {
          assert.ok(err instanceof DialError, `${what}: a DialError`);
          assert.match(err.message, reason, what);
          return true;
        });
        assert.ok(performance.now() - started < 2_000, `${what}: failed within its bound`);
      } finally {
        await mux.close();
      }
    }
    // Nothing listening at all: the socket's own error, as a DialError too.
    await assert.rejects(dialHybridVsock({ transport: 'hybrid-vsock', path: path.join(dir, 'absent.sock'), port: 22 }, 300), DialError);
  });

  it('SBX_TRANSPORT: tcp by default, unix, vsock or auto, anything else refused naming the variable', () => {
    assert.equal(transportChoiceFromEnv({}), 'tcp');
    assert.equal(transportChoiceFromEnv({ SBX_TRANSPORT: 'unix' }), 'unix');
    assert.equal(transportChoiceFromEnv({ SBX_TRANSPORT: 'auto' }), 'auto');
    assert.equal(transportChoiceFromEnv({ SBX_TRANSPORT: 'vsock' }), 'vsock');
    assert.throws(() => transportChoiceFromEnv({ SBX_TRANSPORT: 'carrier-pigeon' }), /SBX_TRANSPORT must be one of tcp, unix, vsock, auto/);
  });

  it('QEMU: anything but tcp falls back to TCP, and says why (here: no /dev/vhost-vsock)', () => {
    assert.equal(vsockFallbackReason('tcp', true), undefined, 'tcp asked, tcp given: nothing to say');
    assert.match(vsockFallbackReason('auto', false) ?? '', /\/dev\/vhost-vsock is missing/);
    assert.match(vsockFallbackReason('unix', true) ?? '', /cannot dial AF_VSOCK/);
    assert.equal(qemuSettingsFromEnv({ SBX_TRANSPORT: 'auto' }).transport, 'auto');
    // On this host, as the start-up log will say it.
    const here = vsockFallbackReason('auto');
    assert.match(here ?? '', existsSync(VHOST_VSOCK_DEVICE) ? /AF_VSOCK/ : /is missing/);
  });
});
