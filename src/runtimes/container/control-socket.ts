import { spawn } from 'node:child_process';
import { lstat, rename, rm } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import type { UnixEndpoint } from '../../transport/index.js';

/** The control socket's name in the session dir (root's, 0700: no guest reaches the path). */
export const CONTROL_SOCKET = 'ssh.sock';

/**
 * The guest's side, run by guest root inside the container (`runc exec`), with the
 * listening socket as fd 3: per connection, stock sshd in inetd mode (-i) on the accepted
 * socket, as inetd or systemd's Accept=yes would. python3 is in every image (the desktop
 * helpers use it), so the image needs nothing new. SIGCHLD is ignored so finished sshds are
 * reaped, and reset before exec, since sshd waits for its own children.
 */
const GUEST_LISTENER = `
import os, signal, socket, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
s = socket.socket(fileno=3)
s.setblocking(True)
while True:
    try:
        c, _ = s.accept()
    except OSError:
        time.sleep(0.1)
        continue
    try:
        pid = os.fork()
    except OSError:
        c.close()
        time.sleep(0.1)
        continue
    if pid == 0:
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            fd = c.detach()
            s.close()
            os.dup2(fd, 0)
            os.dup2(fd, 1)
            null = os.open('/dev/null', os.O_WRONLY)
            os.dup2(null, 2)
            os.execv('/usr/sbin/sshd', ['/usr/sbin/sshd', '-i', '-f', '/etc/ssh/sshd_config', '-E', '/run/sandbox/sshd.log'])
        finally:
            os._exit(127)
    c.close()
`;

/** How long `runc exec -d` may take to start the listener. */
const EXEC_TIMEOUT_MS = 15_000;

/**
 * Gives a running container its control socket: the host binds a Unix socket in the session
 * dir and hands the listening descriptor to a listener in the guest (`runc exec
 * --preserve-fds`). The path stays the host's: the guest never sees it, so it can neither
 * replace it with a symlink to another of the host's sockets nor reach it from elsewhere.
 * The container needs no network for it (docs/transport.md).
 */
export async function startControlSocket(runcBin: string, runcRoot: string, containerId: string, sessionDir: string): Promise<UnixEndpoint> {
  const socketPath = path.join(sessionDir, CONTROL_SOCKET);
  // Bound under a temporary name, then renamed: closing the host's copy of the listener
  // unlinks the name it was bound to (libuv), and must not unlink the one the host dials.
  const binding = `${socketPath}.binding`;
  await rm(binding, { force: true });
  await rm(socketPath, { force: true });
  const server = net.createServer();
  // Nothing dials the path before the guest has it; a connection that did would be refused.
  server.on('connection', (socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ path: binding, backlog: 16 }, () => resolve());
  });
  try {
    await rename(binding, socketPath);
    await execListener(runcBin, runcRoot, containerId, listeningFd(server));
  } catch (err) {
    await rm(socketPath, { force: true });
    throw err;
  } finally {
    server.close();
  }
  return { transport: 'unix', path: socketPath };
}

/** The control socket of a container an earlier run started, if it has one. */
export async function controlSocketOf(sessionDir: string): Promise<UnixEndpoint | undefined> {
  const socketPath = path.join(sessionDir, CONTROL_SOCKET);
  const stats = await lstat(socketPath).catch(() => undefined);
  return stats?.isSocket() ? { transport: 'unix', path: socketPath } : undefined;
}

/**
 * The descriptor under a listening net.Server. Node offers no public accessor: its handle's
 * `fd` is read, and its absence is a clear error rather than a guess.
 */
function listeningFd(server: net.Server): number {
  const fd = (server as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new Error('cannot read the descriptor of the control socket (a Node.js change?)');
  return fd;
}

function execListener(runcBin: string, runcRoot: string, containerId: string, fd: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const argv = ['--root', runcRoot, 'exec', '--detach', '--preserve-fds', '1', containerId, '/usr/bin/python3', '-I', '-S', '-c', GUEST_LISTENER];
    const child = spawn(runcBin, argv, { stdio: ['ignore', 'ignore', 'pipe', fd] });
    let stderr = '';
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      if (stderr.length < 4096) stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), EXEC_TIMEOUT_MS);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else
        reject(new Error(`runc exec of the control socket's listener in ${containerId} failed (${signal ?? `exit ${code}`}): ${stderr.trim().slice(0, 500)}`));
    });
  });
}
