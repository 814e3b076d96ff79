import { Duplex, Readable } from 'node:stream';
import type { GuestChannel, GuestTransport } from '../transport/index.js';
import { commandLine } from '../transport/quote.js';
import { GUEST_USER } from '../guest/contract.js';
import { NO_CWD_LINE, PID_LINE, type ProcessSpec } from './process-request.js';
import { SPAWNER_SOURCE } from './spawner-script.js';

/** A frame's header: type byte, process id (u32), payload length (u32). */
const HEAD = 9;
/** The guest's frames are at most this long (its output comes in 32 KiB reads); longer is not our spawner. */
const MAX_GUEST_FRAME = 64 * 1024;
/**
 * Output held by the host for all of a spawner's processes past which it ends (it ignored P).
 * What a spawner sends after a P is what it read before the P reached it: on a loaded host
 * more than 4 MiB (a reader of 50 MB lost 1.4 MB to a spawner ended at 4). 16 MiB is the bound
 * the SSH exec channels had (16 processes of a session, ssh2's 2 MiB window each).
 */
const MAX_HELD = 16 * 1024 * 1024;
/** Standard input goes to the guest in frames of at most this. */
const STDIN_FRAME = 32 * 1024;
/** A process's output the host holds before it asks the spawner to stop reading it. */
const OUTPUT_HIGH_WATER = 64 * 1024;
/**
 * Standard input a write takes before it says to wait: above the process layer's own cap
 * (STDIN_HELD_MAX_BYTES), so that input past the guest's window is refused at once by that
 * cap, as on an SSH channel, rather than after a wait for a drain that does not come.
 */
const STDIN_WINDOW = 2 * 1024 * 1024;
const START_TIMEOUT_MS = 10_000;
const SPAWNER_COMMAND = `exec ${commandLine(['/usr/bin/python3', '-I', '-S', '-c', SPAWNER_SOURCE])}`;

/**
 * A process forked by the guest's spawner, seen as the channel GuestProcess reads: stdout as
 * its data, stderr, 'exit' (code, signal) and 'close', stdin written as frames that the
 * spawner acknowledges once they reached the process (so a process that does not read its
 * stdin fills writableLength, as a channel's window would), pause/resume by the streams'
 * own back-pressure. Its first stderr bytes are the pid line the wrapper shell would print.
 */
export class SpawnedChannel extends Duplex implements GuestChannel {
  readonly stderr: Readable;
  private readonly acks: Array<{ frames: number; done: (err?: Error | null) => void }> = [];
  private outputPaused = false;
  private gone = false;

  constructor(
    private readonly spawner: Spawner,
    readonly ident: number,
  ) {
    super({ readableHighWaterMark: OUTPUT_HIGH_WATER, writableHighWaterMark: STDIN_WINDOW, allowHalfOpen: true });
    this.stderr = new Readable({ highWaterMark: OUTPUT_HIGH_WATER, read: () => this.wantMore() });
    this.stderr.on('error', () => undefined);
    this.on('error', () => undefined);
  }

  override _read(): void {
    this.wantMore();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    if (this.gone) return done();
    let frames = 0;
    for (let at = 0; at < chunk.length || frames === 0; at += STDIN_FRAME, frames++) {
      this.spawner.send('I', this.ident, chunk.subarray(at, at + STDIN_FRAME));
      if (chunk.length === 0) {
        frames++;
        break;
      }
    }
    this.acks.push({ frames, done });
  }

  override _final(done: (err?: Error | null) => void): void {
    if (!this.gone) this.spawner.send('E', this.ident);
    done();
  }

  close(): void {
    if (this.gone) return;
    this.spawner.send('C', this.ident);
    this.ended();
  }

  setWindow(): void {
    // Only terminal processes have a window; they run on sshd's channels, not here.
  }

  /** The guest's frame for this process. */
  frame(kind: string, payload: Buffer): void {
    if (this.gone) return;
    switch (kind) {
      case 'p': {
        // Digits only, or a line GuestProcess refuses as not a pid: nothing else rides on it.
        const pid = payload.toString('latin1');
        this.deliver(this.stderr, Buffer.from(`${PID_LINE}${/^[0-9]{1,7}$/.test(pid) ? pid : 'bad'}\n`, 'latin1'));
        return;
      }
      case 'n':
        this.deliver(this.stderr, Buffer.from(`${NO_CWD_LINE}\n`));
        this.ended(false);
        return;
      case 'o':
        this.deliver(this, payload);
        return;
      case 'e':
        this.deliver(this.stderr, payload);
        return;
      case 'a':
        this.acked();
        return;
      case 'x': {
        const text = payload.toString('latin1');
        const code = Number(text.slice(2));
        if (text.startsWith('c ')) this.emit('exit', Number.isInteger(code) && code >= 0 && code <= 255 ? code : null, undefined);
        else if (text.startsWith('s ') && /^[A-Z0-9]{1,16}$/.test(text.slice(2))) this.emit('exit', null, text.slice(2));
        else this.emit('exit', null, null);
        return;
      }
      case 'z':
        this.ended(false);
        return;
    }
  }

  /**
   * Everything that waited on this process ends (closed by the host, or the spawner is gone:
   * `now`), or its output ended in the guest: then 'close' comes once both streams were read
   * out, so that a reader holding the output back still gets every byte first.
   */
  ended(now = true): void {
    if (this.gone) return;
    this.gone = true;
    this.spawner.forget(this.ident);
    for (const ack of this.acks.splice(0)) ack.done();
    this.push(null);
    this.stderr.push(null);
    if (now) {
      setImmediate(() => this.destroy());
      return;
    }
    let open = 2;
    const one = () => {
      if (--open === 0) this.destroy();
    };
    if (this.readableEnded) one();
    else this.once('end', one);
    if (this.stderr.readableEnded) one();
    else this.stderr.once('end', one);
  }

  /** Output held here, not yet read by the process layer (what a spawner that ignores P would grow). */
  get held(): number {
    return this.readableLength + this.stderr.readableLength;
  }

  private deliver(stream: Readable, data: Buffer): void {
    if (!stream.push(data) && !this.outputPaused) {
      this.outputPaused = true;
      this.spawner.send('P', this.ident);
    }
  }

  /** A stream asks for more (_read: its buffer went under the high-water mark): the guest reads on. */
  private wantMore(): void {
    if (!this.outputPaused || this.gone) return;
    this.outputPaused = false;
    this.spawner.send('R', this.ident);
  }

  private acked(): void {
    const head = this.acks[0];
    if (!head) return;
    if (--head.frames <= 0) {
      this.acks.shift();
      head.done();
    }
  }
}

/**
 * The session's spawner: the guest's end (spawner-script.ts) on one channel, the processes it
 * forked by their ids. Everything the guest sends is bounded here: a frame longer than
 * MAX_GUEST_FRAME or of an unknown type ends the spawner (its processes end as their
 * connection lost), a frame for an id we do not know is dropped, the pid is checked by
 * GuestProcess as the wrapper's pid line is.
 */
export class Spawner {
  private readonly processes = new Map<number, SpawnedChannel>();
  private nextId = 1;
  private pending: Buffer = Buffer.alloc(0);
  private dead = false;

  private constructor(private readonly channel: GuestChannel) {
    channel.on('data', (chunk: Buffer) => this.onData(chunk));
    channel.stderr.on('data', () => undefined);
    channel.on('close', () => this.die());
    channel.on('error', () => this.die());
  }

  /**
   * Starts the spawner in the guest; resolves once it said hello (rejects if it cannot run: no
   * python3). `command` is a fixed one of ours (the red-team tests run a hostile one in its place).
   */
  static async start(connection: GuestTransport, command = SPAWNER_COMMAND): Promise<Spawner> {
    const channel = await connection.spawn(command, START_TIMEOUT_MS);
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        timer = setTimeout(() => reject(new Error('the spawner did not start in time')), START_TIMEOUT_MS);
        let seen = Buffer.alloc(0);
        const onData = (chunk: Buffer) => {
          seen = Buffer.concat([seen, chunk]);
          if (seen.length < HEAD) return;
          channel.off('data', onData);
          if (seen.length !== HEAD || seen[0] !== 0x68) reject(new Error('the spawner did not say hello'));
          else resolve();
        };
        channel.on('data', onData);
        channel.stderr.on('data', () => undefined);
        channel.once('close', () => reject(new Error('the spawner ended before it said hello')));
        channel.on('error', reject);
      });
    } catch (err) {
      channel.close();
      throw err;
    } finally {
      clearTimeout(timer);
    }
    return new Spawner(channel);
  }

  get alive(): boolean {
    return !this.dead;
  }

  /** Forks the process; the channel is handed over at once (its pid comes as its first stderr line). */
  spawn(spec: ProcessSpec, display: number): SpawnedChannel {
    if (this.dead) throw new Error('the spawner is gone');
    if (spec.pty) throw new Error('terminal processes run on their own channel');
    const ident = this.nextId++;
    const argv = spec.argv ?? ['bash', '-lc', spec.cmd as string];
    const env: Array<[string, string]> = [['DISPLAY', `:${display}`], ['LANG', 'C.UTF-8'], ...spec.env];
    const channel = new SpawnedChannel(this, ident);
    this.processes.set(ident, channel);
    this.send('S', ident, Buffer.from(JSON.stringify({ argv, cwd: spec.cwd ?? `/home/${GUEST_USER}`, env })));
    return channel;
  }

  send(kind: string, ident: number, payload: Buffer = Buffer.alloc(0)): void {
    if (this.dead) return;
    const head = Buffer.alloc(HEAD);
    head.write(kind, 0, 'latin1');
    head.writeUInt32BE(ident, 1);
    head.writeUInt32BE(payload.length, 5);
    this.channel.write(payload.length > 0 ? Buffer.concat([head, payload]) : head);
  }

  forget(ident: number): void {
    this.processes.delete(ident);
  }

  close(): void {
    this.die();
  }

  private onData(chunk: Buffer): void {
    this.pending = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    while (this.pending.length >= HEAD && !this.dead) {
      const kind = String.fromCharCode(this.pending[0] as number);
      const ident = this.pending.readUInt32BE(1);
      const length = this.pending.readUInt32BE(5);
      if (length > MAX_GUEST_FRAME || !'pnoeaxz'.includes(kind)) return this.die();
      if (this.pending.length < HEAD + length) return;
      const payload = this.pending.subarray(HEAD, HEAD + length);
      this.pending = this.pending.subarray(HEAD + length);
      if ((kind === 'p' || kind === 'x') && length > 32) return this.die();
      const process = this.processes.get(ident);
      if (!process) continue;
      process.frame(kind, payload);
      // Output keeps coming while the host asked to pause (in flight: at most the SSH window);
      // past MAX_HELD across the processes, the spawner is not ours: it ends.
      if ((kind === 'o' || kind === 'e') && process.held > OUTPUT_HIGH_WATER && this.heldTotal() > MAX_HELD) return this.die();
    }
  }

  private heldTotal(): number {
    let total = 0;
    for (const process of this.processes.values()) total += process.held;
    return total;
  }

  private die(): void {
    if (this.dead) return;
    this.dead = true;
    this.pending = Buffer.alloc(0);
    this.channel.close();
    for (const process of [...this.processes.values()]) process.ended();
    this.processes.clear();
  }
}
