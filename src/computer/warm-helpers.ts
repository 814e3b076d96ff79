import { randomBytes } from 'node:crypto';
import type { GuestChannel, GuestTransport } from '../transport/index.js';
import { commandLine } from '../transport/quote.js';
import { CAPTURE_COMMAND } from './capture-channel.js';
import { INPUT_COMMAND } from './input-channel.js';

/**
 * Warm helpers (issue 27): the desktop helpers' interpreter started before anyone needs it,
 * so that a warm claim does not wait for a `python3 -I` start-up (and ctypes loading libX11)
 * on its path. A pooled sandbox starts, over the pool's connection, one process in the guest
 * (the launcher below, as the guest user, `python3 -I -S`) that imports what the helpers
 * import, loads their libraries, compiles sbx-input and sbx-capture, then detaches from that
 * connection (its own session, stdio on /dev/null: nothing of the pool's connection is left
 * when it closes) and listens on an ephemeral port of the guest's loopback. A connection there
 * that first sends the launcher's token and a helper's name gets a fork of it running that
 * helper with the connection as its stdin and stdout: the helper answers on the channel that
 * opened it (an SSH direct-tcpip channel of the session's connection) and on nothing else.
 *
 * The token is made on the host, sent on the launcher's stdin (never on a command line, which
 * any guest process can read), and kept in the orchestrator's memory only: a guest process
 * that connects to the port without it gets nothing (its fork exits after a short wait). The
 * guest user could still bind the port should the launcher die, or trace the helpers, as it
 * can today: the helpers are the guest's, and everything they send is checked on the host.
 * If the launcher cannot be reached, the desktop starts its helpers the usual way (spawn).
 */

export type WarmHelperName = 'input' | 'capture';

/** Where a sandbox's launcher listens, and the token it wants. Host memory only. */
export interface WarmHelpers {
  port: number;
  token: string;
}

const HELPERS: Record<WarmHelperName, string> = { input: INPUT_COMMAND, capture: CAPTURE_COMMAND };

/** How long a connection to the launcher has to send its token line before its fork gives up. */
const TOKEN_WAIT_S = 2;

const LAUNCHER = `
import ctypes, hmac, os, select, signal, socket, struct, sys, time, zlib
for lib in ("libX11.so.6", "libXext.so.6", "libXtst.so.6", "libXdamage.so.1", "libXfixes.so.3"):
    try:
        ctypes.CDLL(lib)
    except OSError:
        pass
HELPERS = {${Object.entries(HELPERS)
  .map(([name, file]) => `b"${name}": "${file}"`)
  .join(', ')}}
CODE = {}
for name, path in HELPERS.items():
    with open(path, "rb") as f:
        CODE[name] = (path, compile(f.read(), path, "exec"))
token = sys.stdin.buffer.readline(256).strip()
if len(token) < 32:
    sys.exit(2)
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(("127.0.0.1", 0))
listener.listen(16)
if os.fork():
    sys.stdout.write("%d\\n" % listener.getsockname()[1])
    sys.stdout.flush()
    os._exit(0)
os.setsid()
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
os.close(null)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
def serve(conn):
    conn.settimeout(${TOKEN_WAIT_S})
    # Byte by byte: what follows the line is the helper's first request, and stays unread.
    line = b""
    while not line.endswith(b"\\n") and len(line) < 256:
        chunk = conn.recv(1)
        if not chunk:
            return 1
        line += chunk
    given, _, name = line.strip().partition(b" ")
    if not hmac.compare_digest(given, token) or name not in CODE:
        return 1
    conn.settimeout(None)
    fd = conn.detach()
    os.dup2(fd, 0)
    os.dup2(fd, 1)
    os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    path, code = CODE[name]
    sys.argv = [path]
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
    return 0
while True:
    try:
        conn, _ = listener.accept()
    except OSError:
        time.sleep(0.1)
        continue
    try:
        pid = os.fork()
    except OSError:
        conn.close()
        time.sleep(0.1)
        continue
    if pid == 0:
        status = 1
        try:
            listener.close()
            status = serve(conn)
        except SystemExit as end:
            status = end.code if isinstance(end.code, int) else 0
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    conn.close()
`;

/** The launcher's one line: a port and its newline. */
const MAX_PORT_LINE_BYTES = 16;

/** How long the launcher may take to say its port (it imports and compiles first). */
const START_TIMEOUT_MS = 15_000;

/** Starts the launcher in the guest (see above) over `connection`; resolves once it listens. */
export async function startWarmHelpers(connection: GuestTransport, display: number): Promise<WarmHelpers> {
  if (!Number.isInteger(display) || display < 0) throw new Error(`bad display number ${display}`);
  const token = randomBytes(24).toString('hex');
  const channel = await connection.spawn(`DISPLAY=:${display} exec ${commandLine(['/usr/bin/python3', '-I', '-S', '-c', LAUNCHER])}`, START_TIMEOUT_MS);
  let timer: NodeJS.Timeout | undefined;
  let onData: ((chunk: Buffer) => void) | undefined;
  try {
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      timer = setTimeout(() => reject(new Error('the helper launcher did not start in time')), START_TIMEOUT_MS);
      onData = (chunk: Buffer) => {
        // Kept to one byte past the line's cap, checked before anything more is kept.
        out += chunk.subarray(0, MAX_PORT_LINE_BYTES + 1 - out.length).toString('latin1');
        if (out.length > MAX_PORT_LINE_BYTES) reject(new Error('the helper launcher said more than a port'));
        else if (out.includes('\n')) resolve(out);
      };
      channel.on('data', onData);
      channel.on('close', () => reject(new Error(`the helper launcher ended before it listened${out ? `: ${out.slice(0, 40)}` : ''}`)));
      channel.on('error', (err: Error) => reject(err));
      channel.write(`${token}\n`);
    });
    const port = Number(line.trim());
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`the helper launcher said ${JSON.stringify(line.slice(0, 20))}, not a port`);
    return { port, token };
  } finally {
    clearTimeout(timer);
    // Whatever the guest sends after the line (or instead of it) is drained, never kept.
    if (onData) channel.off('data', onData);
    channel.on('data', () => undefined);
    channel.close();
  }
}

/**
 * A helper forked from the launcher, on a new direct-tcpip channel of `connection`: its stdin
 * and stdout, as a spawned helper's channel would be (it has no stderr of its own here).
 */
export async function openWarmHelper(connection: GuestTransport, helpers: WarmHelpers, name: WarmHelperName): Promise<GuestChannel> {
  const channel = await connection.forwardToGuestLoopback(helpers.port);
  channel.write(`${helpers.token} ${name}\n`);
  return channel;
}
