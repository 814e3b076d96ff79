/**
 * How the emulator saves and loads its guest for a snapshot: the guest's QEMU migrated over a
 * Unix socket into the memory file (QEMU here has no `file:` migration and runs with
 * spawn=deny), and a new QEMU with `-incoming unix:` fed from it; QMP asked and polled.
 */
import { chmodSync, createWriteStream, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';

/** The guest's QEMU migrated into `file` (over the migration socket); answers the stream's length. */
export async function migrateGuestTo(qmpSocket: string, migrationSocket: string, file: string): Promise<number> {
  rmSync(migrationSocket, { force: true });
  const listener = net.createServer();
  await new Promise<void>((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(migrationSocket, () => resolve());
  });
  chmodSync(migrationSocket, 0o666); // unjailed, the guest's QEMU runs as nobody
  const written = new Promise<void>((resolve, reject) => {
    listener.once('connection', (socket) => {
      listener.close();
      pipeline(socket, createWriteStream(file, { mode: 0o600 })).then(resolve, reject);
    });
  });
  try {
    await qmpAsk(qmpSocket, 'migrate', { uri: `unix:${migrationSocket}` });
    await untilStatus(
      qmpSocket,
      'query-migrate',
      (r) => r.status === 'completed',
      (r) => (r.status === 'failed' ? `the guest's migration failed: ${String(r['error-desc'])}` : undefined),
    );
    await written;
  } finally {
    listener.close();
    rmSync(migrationSocket, { force: true });
  }
  return statSync(file).size;
}

/** Connects once the guest's QEMU listens (-incoming unix:). */
export async function connectWhenListening(socketPath: string): Promise<net.Socket> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const socket = await new Promise<net.Socket | undefined>((resolve) => {
      const s = net.connect(socketPath);
      s.once('connect', () => resolve(s));
      s.once('error', () => resolve(undefined));
    });
    if (socket) return socket;
    await sleep(50);
  }
  throw new Error(`the guest's QEMU did not listen on ${socketPath}`);
}

/** Asks QMP `execute` until `done` says so (or `failed` gives a reason), within 120 s. */
export async function untilStatus(
  qmpSocket: string,
  execute: string,
  done: (r: Record<string, unknown>) => boolean,
  failed: (r: Record<string, unknown>) => string | undefined,
): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const answer = (await qmpAsk(qmpSocket, execute).catch(() => ({}))) as Record<string, unknown>;
    if (done(answer)) return;
    const why = failed(answer);
    if (why) throw new Error(why);
    await sleep(50);
  }
  throw new Error(`QMP ${execute} did not say done within 120 s`);
}

/** One QMP command, its `return` answered (or its error thrown). */
export function qmpAsk(qmpSocket: string, execute: string, args?: Record<string, unknown>): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const connection = net.connect(qmpSocket);
    let text = '';
    connection.on('error', reject);
    connection.on('connect', () => {
      connection.write(JSON.stringify({ execute: 'qmp_capabilities' }) + '\n');
      connection.write(JSON.stringify({ execute, ...(args ? { arguments: args } : {}) }) + '\n');
    });
    connection.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
      const answers = text
        .split('\n')
        .filter((line) => line.includes('"return"') || line.includes('"error"'))
        .map((line) => JSON.parse(line) as { return?: unknown; error?: { desc: string } });
      const mine = answers[1];
      if (!mine) return;
      connection.end();
      if (mine.error) reject(new Error(mine.error.desc));
      else resolve(mine.return);
    });
  });
}
