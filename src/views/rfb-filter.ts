import type { ViewMode } from './view-tokens.js';

/**
 * The RFB (VNC) protocol as the live view's proxy enforces it, both ways (RFC 6143). Only
 * version 3.8 and security type None are spoken: the tunnel is the session's SSH
 * connection, the browser was let in by its token, and x11vnc runs with -nopw on the
 * guest's loopback. Everything a browser sends is parsed message by message against an
 * allow-list; a view-only token's input messages (key, pointer, cut text) are dropped here,
 * on the server, whatever the page does. The guest's side is parsed only as far as the
 * handshake, and every length it announces is checked before anything waits for it.
 */

export class RfbViolation extends Error {
  constructor(
    readonly side: 'client' | 'server',
    message: string,
  ) {
    super(message);
    this.name = 'RfbViolation';
  }
}

const VERSION_3_8 = Buffer.from('RFB 003.008\n', 'latin1');
const SECURITY_NONE = 1;
/** Longest desktop name a guest may announce in ServerInit (x11vnc's is a few dozen bytes). */
export const MAX_SERVER_NAME_BYTES = 1024;
/** Most encodings a browser may list in one SetEncodings (noVNC sends about 25). */
const MAX_ENCODINGS = 256;
/** Largest clipboard a control viewer may paste into the guest in one message. */
export const MAX_CLIENT_CUT_TEXT_BYTES = 256 * 1024;
/** Longest ClientFence payload (RFB says at most 64). */
const MAX_FENCE_BYTES = 64;

/** Client-to-server message types (RFC 6143 section 7.5, plus the extensions noVNC sends). */
const enum ClientMessage {
  SetPixelFormat = 0,
  SetEncodings = 2,
  FramebufferUpdateRequest = 3,
  KeyEvent = 4,
  PointerEvent = 5,
  ClientCutText = 6,
  EnableContinuousUpdates = 150,
  ClientFence = 248,
  Qemu = 255,
}

/** What one client message is: its length once enough bytes are there, and whether it is input. */
interface Sized {
  length: number;
  input: boolean;
}

/** The most a message's size needs to be told (sizeOf): a ClientFence's 9 bytes, with room. */
const HEADER_PEEK_BYTES = 16;

/**
 * Bytes accumulated until a whole unit (handshake step, message) is there. Kept as the chunks
 * that came, joined only when a unit is taken (or a header peeked at): a message that comes a
 * byte a frame costs its length once, not its length times its frames.
 */
class Pending {
  private chunks: Buffer[] = [];
  private total = 0;

  add(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.total += chunk.length;
  }

  get length(): number {
    return this.total;
  }

  /** The first `n` bytes, or all there are if fewer. */
  peek(n: number): Buffer {
    this.join(Math.min(n, this.total));
    return (this.chunks[0] ?? Buffer.alloc(0)).subarray(0, n);
  }

  take(n: number): Buffer {
    const count = Math.min(n, this.total);
    this.join(count);
    const first = this.chunks[0] ?? Buffer.alloc(0);
    const head = first.subarray(0, count);
    if (first.length > count) this.chunks[0] = first.subarray(count);
    else this.chunks.shift();
    this.total -= count;
    return head;
  }

  rest(): Buffer {
    return this.take(this.total);
  }

  /** Makes the first chunk at least `n` bytes long (n <= total), joining as few as that needs. */
  private join(n: number): void {
    const first = this.chunks[0];
    if (!first || first.length >= n) return;
    let have = 0;
    let count = 0;
    while (have < n) have += (this.chunks[count++] as Buffer).length;
    this.chunks.splice(0, count, Buffer.concat(this.chunks.slice(0, count), have));
  }
}

/** The browser's bytes: version, security choice, ClientInit, then messages checked one by one. */
export class ClientFilter {
  private phase: 'version' | 'security' | 'init' | 'messages' = 'version';
  private readonly pending = new Pending();
  /** Input messages dropped (view tokens), for tests and logs. */
  dropped = 0;

  constructor(private readonly mode: ViewMode) {}

  /** The bytes of `chunk` (with what came before) that may go on to the guest. */
  push(chunk: Buffer): Buffer[] {
    this.pending.add(chunk);
    const out: Buffer[] = [];
    for (;;) {
      const unit = this.next();
      if (!unit) return out;
      if (unit.forward) out.push(unit.bytes);
      else this.dropped++;
    }
  }

  private next(): { bytes: Buffer; forward: boolean } | undefined {
    const p = this.pending;
    switch (this.phase) {
      case 'version': {
        if (p.length < 12) return undefined;
        const version = p.take(12);
        if (!version.equals(VERSION_3_8)) throw new RfbViolation('client', 'the viewer does not speak RFB 3.8');
        this.phase = 'security';
        return { bytes: version, forward: true };
      }
      case 'security': {
        if (p.length < 1) return undefined;
        const choice = p.take(1);
        if (choice[0] !== SECURITY_NONE) throw new RfbViolation('client', 'the viewer chose a security type that was not offered');
        this.phase = 'init';
        return { bytes: choice, forward: true };
      }
      case 'init': {
        if (p.length < 1) return undefined;
        p.take(1);
        this.phase = 'messages';
        // Always shared: one viewer must never disconnect the others (or the recorder).
        return { bytes: Buffer.from([1]), forward: true };
      }
      case 'messages': {
        if (p.length < 1) return undefined;
        const sized = sizeOf(p.peek(HEADER_PEEK_BYTES));
        if (!sized || p.length < sized.length) return undefined;
        const bytes = p.take(sized.length);
        return { bytes, forward: !sized.input || this.mode === 'control' };
      }
    }
  }
}

/** The size of the client message at the head of `buf`, undefined until enough is there to tell. */
function sizeOf(buf: Buffer): Sized | undefined {
  const type = buf[0];
  switch (type) {
    case ClientMessage.SetPixelFormat:
      return { length: 20, input: false };
    case ClientMessage.SetEncodings: {
      if (buf.length < 4) return undefined;
      const count = buf.readUInt16BE(2);
      if (count > MAX_ENCODINGS) throw new RfbViolation('client', `SetEncodings lists ${count} encodings (at most ${MAX_ENCODINGS})`);
      return { length: 4 + 4 * count, input: false };
    }
    case ClientMessage.FramebufferUpdateRequest:
      return { length: 10, input: false };
    case ClientMessage.KeyEvent:
      return { length: 8, input: true };
    case ClientMessage.PointerEvent:
      return { length: 6, input: true };
    case ClientMessage.ClientCutText: {
      if (buf.length < 8) return undefined;
      // A negative length is the extended clipboard (its caps, notify, provide...: noVNC
      // sends its caps when the server announces the pseudo-encoding): |length| bytes follow.
      const length = Math.abs(buf.readInt32BE(4));
      if (length > MAX_CLIENT_CUT_TEXT_BYTES) throw new RfbViolation('client', `ClientCutText of ${length} bytes (at most ${MAX_CLIENT_CUT_TEXT_BYTES})`);
      return { length: 8 + length, input: true };
    }
    case ClientMessage.EnableContinuousUpdates:
      return { length: 10, input: false };
    case ClientMessage.ClientFence: {
      if (buf.length < 9) return undefined;
      const length = buf[8]!;
      if (length > MAX_FENCE_BYTES) throw new RfbViolation('client', `ClientFence of ${length} bytes (at most ${MAX_FENCE_BYTES})`);
      return { length: 9 + length, input: false };
    }
    case ClientMessage.Qemu: {
      if (buf.length < 2) return undefined;
      // Only QEMU's extended key event (submessage 0) exists; it is a key press.
      if (buf[1] !== 0) throw new RfbViolation('client', `unknown QEMU client message ${buf[1]}`);
      return { length: 12, input: true };
    }
    default:
      // Anything else (SetDesktopSize, xvp, garbage) is refused: a view never resizes or
      // reboots the guest's screen, and an unparsable stream cannot be filtered.
      throw new RfbViolation('client', `client message type ${type} is not allowed`);
  }
}

/**
 * The guest's bytes: its version, security types (offered on to the browser as None only),
 * the security result and ServerInit (the name's length checked before it is waited for);
 * after that a plain stream, bounded by the proxy per viewer.
 */
export class ServerFilter {
  private phase: 'version' | 'types' | 'result' | 'init' | 'stream' = 'version';
  private readonly pending = new Pending();

  /** The bytes that may go on to the browser. */
  push(chunk: Buffer): Buffer[] {
    this.pending.add(chunk);
    const out: Buffer[] = [];
    for (;;) {
      if (this.phase === 'stream') {
        if (this.pending.length > 0) out.push(this.pending.rest());
        return out;
      }
      const step = this.next();
      if (!step) return out;
      if (step.length > 0) out.push(step);
    }
  }

  private next(): Buffer | undefined {
    const p = this.pending;
    switch (this.phase) {
      case 'version': {
        if (p.length < 12) return undefined;
        const version = p.take(12);
        if (!version.equals(VERSION_3_8)) throw new RfbViolation('server', 'the guest VNC server does not speak RFB 3.8');
        this.phase = 'types';
        return version;
      }
      case 'types': {
        if (p.length < 1) return undefined;
        const count = p.peek(1)[0]!;
        if (count === 0) throw new RfbViolation('server', 'the guest VNC server refused the connection');
        if (p.length < 1 + count) return undefined;
        const types = p.take(1 + count).subarray(1);
        if (!types.includes(SECURITY_NONE)) throw new RfbViolation('server', 'the guest VNC server does not offer security type None');
        this.phase = 'result';
        return Buffer.from([1, SECURITY_NONE]);
      }
      case 'result': {
        if (p.length < 4) return undefined;
        const result = p.take(4);
        if (result.readUInt32BE(0) !== 0) throw new RfbViolation('server', 'the guest VNC server failed the security handshake');
        this.phase = 'init';
        return result;
      }
      case 'init': {
        if (p.length < 24) return undefined;
        const head = p.peek(24);
        const width = head.readUInt16BE(0);
        const height = head.readUInt16BE(2);
        if (width === 0 || height === 0) throw new RfbViolation('server', `the guest VNC server announced a ${width}x${height} screen`);
        const nameLength = head.readUInt32BE(20);
        if (nameLength > MAX_SERVER_NAME_BYTES)
          throw new RfbViolation('server', `the guest VNC server announced a ${nameLength}-byte desktop name (at most ${MAX_SERVER_NAME_BYTES})`);
        if (p.length < 24 + nameLength) return undefined;
        this.phase = 'stream';
        return p.take(24 + nameLength);
      }
      case 'stream':
        return undefined;
    }
  }
}
