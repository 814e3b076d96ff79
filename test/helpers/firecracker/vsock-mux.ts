import { rmSync, symlinkSync } from 'node:fs';
import net from 'node:net';

/**
 * The host side of Firecracker's hybrid vsock, as the stand-in plays it (docs: vsock.md of
 * Firecracker): a Unix socket bound at the `uds_path` of `PUT /vsock` (or of a snapshot's
 * `vsock_override`) when the device is configured; a host connection sends
 * `CONNECT <port>\n` and Firecracker answers `OK <host port>\n` once a guest listener on that
 * port accepted, or closes the connection if none does. There is no guest behind the stand-in,
 * so FAKE_FIRECRACKER_VSOCK says how the far end behaves:
 *  - `refuse` (default): nothing listens on the guest's port: the connection is closed;
 *  - `garbage`: a line that is not `OK <n>` (what a VMM gone wrong could send);
 *  - `ok-garbage`: `OK`, then bytes that are no SSH banner (a guest whose listener is not sshd);
 *  - `silent`: no answer at all (a guest or VMM that hangs);
 *  - `symlink:<path>`: no socket, a symbolic link to another socket of the host instead (a
 *    VMM gone wrong, pointing the host at something of its own choosing).
 * Each CONNECT line received is reported through `onConnect`.
 */
export type VsockBehaviour = 'refuse' | 'garbage' | 'ok-garbage' | 'silent' | `symlink:${string}`;

export function vsockBehaviour(value: string | undefined): VsockBehaviour {
  if (value === 'garbage' || value === 'ok-garbage' || value === 'silent') return value;
  if (value?.startsWith('symlink:')) return value as VsockBehaviour;
  return 'refuse';
}

export function listenHybridVsock(socketPath: string, behaviour: VsockBehaviour, onConnect: (line: string) => void): net.Server | undefined {
  // Firecracker refuses a path that exists; a stand-in restarted on the same jail replaces it.
  rmSync(socketPath, { force: true });
  if (behaviour.startsWith('symlink:')) {
    symlinkSync(behaviour.slice('symlink:'.length), socketPath);
    return undefined;
  }
  const server = net.createServer((conn) => {
    conn.on('error', () => undefined);
    let line = '';
    const onData = (chunk: Buffer) => {
      line += chunk.toString('latin1');
      const newline = line.indexOf('\n');
      if (newline < 0) {
        if (line.length > 64) conn.destroy();
        return;
      }
      conn.off('data', onData);
      onConnect(line.slice(0, newline));
      if (behaviour === 'refuse') conn.destroy();
      else if (behaviour === 'garbage') conn.write('HELLO from a confused multiplexer\n');
      else if (behaviour === 'ok-garbage') conn.write(`OK 1073741824\n${'\u00ff'.repeat(300)}\r\n`, 'latin1');
      // silent: holds the connection, answers nothing
    };
    conn.on('data', onData);
  });
  server.on('error', (err) => console.error(`[firecracker-emulator] vsock ${socketPath}: ${err.message}`));
  server.listen(socketPath);
  return server;
}
