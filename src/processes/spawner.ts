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
 * Output a process may have in flight or held by the host, not yet read by the process layer:
 * the spawner sends a process's output only as far as the host granted it (G frames, as an
 * SSH window), so what the host holds is bounded by this per process whatever the guest does,
 * and a byte past the grant is a spawner that is not ours: it ends. 256 KiB keeps a reader at
 * full speed (the grant is topped up as each quarter of it is read), and is what a paused
 * channel can hand the process layer at once when it resumes: that layer pauses a process
 * whose reader is half its 1 MiB log behind, so a window as large as the log overran it.
 */
export const OUTPUT_WINDOW = 256 * 1024;
/** The grant is topped up once this much of the window is free again (fewer, larger G frames). */
const GRANT_STEP = OUTPUT_WINDOW / 4;
/** A forgotten process's control frames that may still be in flight: its exit, close and stdin acknowledgements. */
const STRAY_CONTROL_BYTES = 4096;
/** Standard input goes to the guest in frames of at most this. */
const STDIN_FRAME = 32 * 1024;
/** A process's output stream's buffer (the window above is what bounds it; see topUp). */
const OUTPUT_HIGH_WATER = 64 * 1024;
/**
 * Standard input a write takes before it says to wait: above the process layer's own cap
 * (STDIN_HELD_MAX_BYTES), so that input past the guest's window is refused at once by that
 * cap, as on an SSH channel, rather than after a wait for a drain that does not come.
 */
const STDIN_WINDOW = 2 * 1024 * 1024;
const START_TIMEOUT_MS = 10_000;
export const SPAWNER_COMMAND = `exec ${commandLine(['/usr/bin/python3', '-I', '-S', '-c', SPAWNER_SOURCE])}`;

/**
 * A process forked by the guest's spawner, seen as the channel GuestProcess reads: stdout as
 * its data, stderr, 'exit' (code, signal) and 'close', stdin written as frames that the
 * spawner acknowledges once they reached the process (so a process that does not read its
 * stdin fills writableLength, as a channel's window would), output as far as granted, the
 * grant topped up as the streams are read. Its first stderr bytes are the pid line the
 * wrapper shell would print.
 */
export class SpawnedChannel extends Duplex implements GuestChannel {
  readonly stderr: Readable;
  private readonly acks: Array<{ frames: number; done: (err?: Error | null) => void }> = [];
  /** Signals sent, waiting for the spawner to say they were delivered. */
  private readonly signalled: Array<() => void> = [];
  /** Output the guest may still send (granted, not yet received). */
  private credit = 0;
  private gone = false;
  /** The frames a process gets once: its pid ('p', first) and its exit status ('x'). */
  private readonly told = new Set<'p' | 'x'>();

  constructor(
    private readonly spawner: Spawner,
    readonly ident: number,
  ) {
    super({ readableHighWaterMark: OUTPUT_HIGH_WATER, writableHighWaterMark: STDIN_WINDOW, allowHalfOpen: true });
    this.stderr = new Readable({ highWaterMark: OUTPUT_HIGH_WATER, read: () => this.topUp() });
    this.stderr.on('error', () => undefined);
    this.on('error', () => undefined);
  }

  override _read(): void {
    this.topUp();
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

  /**
   * Sends the signal (one of GuestProcess's SIGNALS) to every process of this process's
   * session in the guest; resolves once the spawner did, or the process is gone (an answer
   * that comes after the time limit is still taken as this signal's).
   */
  signal(name: string, timeoutMs: number): Promise<void> {
    if (this.gone) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the spawner did not send ${name} within ${timeoutMs} ms`)), timeoutMs);
      this.signalled.push(() => {
        clearTimeout(timer);
        resolve();
      });
      this.spawner.send('K', this.ident, Buffer.from(name, 'latin1'));
    });
  }

  setWindow(): void {
    // Only terminal processes have a window; they run on sshd's channels, not here.
  }

  /**
   * The guest's frame for this process; false when it broke the protocol (output past its
   * grant, an acknowledgement of stdin never sent): the spawner is not ours.
   */
  frame(kind: string, payload: Buffer): boolean {
    if (this.gone) return true;
    if (kind === 'o' || kind === 'e') {
      if (payload.length > this.credit) return false;
      this.credit -= payload.length;
    }
    switch (kind) {
      case 'p': {
        // Once, first: a second pid could name another process for the signals that follow.
        if (this.told.size > 0) return false;
        this.told.add('p');
        // Digits only, or a line GuestProcess refuses as not a pid: nothing else rides on it.
        const pid = payload.toString('latin1');
        this.stderr.push(Buffer.from(`${PID_LINE}${/^[0-9]{1,7}$/.test(pid) ? pid : 'bad'}\n`, 'latin1'));
        return true;
      }
      case 'n':
        this.stderr.push(Buffer.from(`${NO_CWD_LINE}\n`));
        this.ended(false);
        return true;
      case 'o':
        this.push(payload);
        this.topUp();
        return true;
      case 'e':
        this.stderr.push(payload);
        this.topUp();
        return true;
      case 'a':
        return this.acked();
      case 'k': {
        const done = this.signalled.shift();
        done?.();
        return done !== undefined;
      }
      case 'x': {
        // Once: a second status would end the process twice for whoever waits on it.
        if (this.told.has('x')) return false;
        this.told.add('x');
        const text = payload.toString('latin1');
        const code = Number(text.slice(2));
        if (text.startsWith('c ')) this.emit('exit', Number.isInteger(code) && code >= 0 && code <= 255 ? code : null, undefined);
        else if (text.startsWith('s ') && /^[A-Z0-9]{1,16}$/.test(text.slice(2))) this.emit('exit', null, text.slice(2));
        else this.emit('exit', null, null);
        return true;
      }
      case 'z':
        this.ended(false);
        return true;
    }
    return true;
  }

  /**
   * Everything that waited on this process ends (closed by the host, or the spawner is gone:
   * `now`), or its output ended in the guest: then 'close' comes once both streams were read
   * out, so that a reader holding the output back still gets every byte first.
   */
  ended(now = true): void {
    if (this.gone) return;
    this.gone = true;
    this.spawner.forget(this.ident, this.credit);
    for (const ack of this.acks.splice(0)) ack.done();
    for (const done of this.signalled.splice(0)) done();
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

  /** Output held here, not yet read by the process layer. */
  get held(): number {
    return this.readableLength + this.stderr.readableLength;
  }

  /** Grant the guest what is free of the window again, once it is at least a GRANT_STEP. */
  topUp(): void {
    if (this.gone) return;
    const free = OUTPUT_WINDOW - this.credit - this.held;
    if (free < GRANT_STEP) return;
    this.credit += free;
    const amount = Buffer.alloc(4);
    amount.writeUInt32BE(free, 0);
    this.spawner.send('G', this.ident, amount);
  }

  private acked(): boolean {
    const head = this.acks[0];
    if (!head) return false;
    if (--head.frames <= 0) {
      this.acks.shift();
      head.done();
    }
    return true;
  }
}

/**
 * The session's spawner: the guest's end (spawner-script.ts) on one channel, the processes it
 * forked by their ids. Everything the guest sends is bounded here: a frame longer than
 * MAX_GUEST_FRAME or of an unknown type, output past a process's grant, a frame for a process
 * never started or more for forgotten ones than could be in flight ends the spawner (its
 * processes end as their connection lost); the pid is checked by GuestProcess as the
 * wrapper's pid line is.
 */
export class Spawner {
  private readonly processes = new Map<number, SpawnedChannel>();
  private nextId = 1;
  /** Bytes of frames for forgotten processes that may still arrive (see forget). */
  private strayAllowance = 0;
  private pending: Buffer = Buffer.alloc(0);
  /** Frames of this turn of the event loop, not yet written (see send). */
  private outgoing: Buffer[] = [];
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
  static async start(connection: Pick<GuestTransport, 'spawn'>, command = SPAWNER_COMMAND): Promise<Spawner> {
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
    channel.topUp();
    return channel;
  }

  /**
   * Queues a frame; the frames of one turn of the event loop leave in one write (a start and
   * its first grant are one SSH packet, one wake-up of sshd and of the spawner, not two).
   */
  send(kind: string, ident: number, payload?: Buffer): void {
    if (this.dead) return;
    const head = Buffer.alloc(HEAD);
    head.write(kind, 0, 'latin1');
    head.writeUInt32BE(ident, 1);
    head.writeUInt32BE(payload?.length ?? 0, 5);
    if (this.outgoing.length === 0) queueMicrotask(() => this.flush());
    this.outgoing.push(head);
    if (payload && payload.length > 0) this.outgoing.push(payload);
  }

  private flush(): void {
    const frames = this.outgoing;
    this.outgoing = [];
    if (!this.dead && frames.length > 0) this.channel.write(frames.length === 1 ? frames[0] : Buffer.concat(frames));
  }

  /**
   * A process the host is done with: frames for it may still be in flight (its output as far
   * as granted, its last few control frames), and are dropped; beyond that allowance they are
   * a spawner that is not ours.
   */
  forget(ident: number, credit: number): void {
    if (this.processes.delete(ident)) this.strayAllowance += credit + STRAY_CONTROL_BYTES;
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
      if (length > MAX_GUEST_FRAME || !'pnoeaxzk'.includes(kind)) return this.die();
      if (this.pending.length < HEAD + length) return;
      const payload = this.pending.subarray(HEAD, HEAD + length);
      this.pending = this.pending.subarray(HEAD + length);
      if ((kind === 'p' || kind === 'x') && length > 32) return this.die();
      const process = this.processes.get(ident);
      if (process) {
        if (!process.frame(kind, payload)) return this.die();
        continue;
      }
      // A process we never started, or more for forgotten ones than could be in flight.
      this.strayAllowance -= HEAD + length;
      if (ident === 0 || ident >= this.nextId || this.strayAllowance < 0) return this.die();
    }
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
