/**
 * A raw RFB (VNC) viewer's side of the protocol (RFC 6143), enough to count frames: the
 * handshake the live view's proxy speaks (version 3.8, security type None, a shared
 * ClientInit), then SetEncodings (ZRLE and Raw only, no pseudo-encodings, so every message's
 * length can be read without decoding it) and a FramebufferUpdateRequest after each
 * FramebufferUpdate, incremental, as a viewer asks for frames as fast as they come. Bytes go
 * in through feed() in whatever chunks the WebSocket delivers; what the viewer answers goes
 * out through `send`.
 */

const VERSION_3_8 = Buffer.from('RFB 003.008\n', 'latin1');
const SECURITY_NONE = 1;
const ENCODING_RAW = 0;
const ENCODING_COPY_RECT = 1;
const ENCODING_ZRLE = 16;
const ENCODING_DESKTOP_SIZE = -223;
const ENCODING_LAST_RECT = -224;
const ENCODING_CURSOR = -239;

type Phase = 'version' | 'security' | 'result' | 'init' | 'message' | 'rect';

export class RfbFrameCounter {
  /** FramebufferUpdate messages received whole. */
  updates = 0;
  /** Bytes received since the handshake ended. */
  bytes = 0;
  width = 0;
  height = 0;
  private bitsPerPixel = 32;
  private phase: Phase = 'version';
  private pending: Buffer = Buffer.alloc(0);
  /** Bytes of a rectangle's or message's body still to skip (not decoded: only counted). */
  private skip = 0;
  private rectsLeft = 0;
  private updateEnding = false;

  constructor(private readonly send: (message: Buffer) => void) {}

  get ready(): boolean {
    return this.phase === 'message' || this.phase === 'rect';
  }

  feed(chunk: Buffer): void {
    if (this.ready) this.bytes += chunk.length;
    if (this.skip > 0) {
      const skipped = Math.min(this.skip, chunk.length);
      this.skip -= skipped;
      chunk = chunk.subarray(skipped);
    }
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.step()) {
      // each step consumed a whole unit; go on while there are bytes for the next
    }
  }

  /** One unit (a handshake step, a message header, a rectangle header) if its bytes are there. */
  private step(): boolean {
    if (this.skip > 0) {
      const skipped = Math.min(this.skip, this.pending.length);
      this.skip -= skipped;
      this.pending = this.pending.subarray(skipped);
      if (this.skip > 0) return false;
    }
    if (this.updateEnding) {
      this.updateEnding = false;
      this.updates++;
      this.requestUpdate(true);
    }
    const p = this.pending;
    switch (this.phase) {
      case 'version':
        if (p.length < 12) return false;
        this.take(12);
        this.send(VERSION_3_8);
        this.phase = 'security';
        return true;
      case 'security': {
        if (p.length < 1 || p.length < 1 + (p[0] as number)) return false;
        const types = [...p.subarray(1, 1 + (p[0] as number))];
        if (!types.includes(SECURITY_NONE)) throw new Error(`the server offers no security type None (${types.join(', ')})`);
        this.take(1 + types.length);
        this.send(Buffer.from([SECURITY_NONE]));
        this.phase = 'result';
        return true;
      }
      case 'result':
        if (p.length < 4) return false;
        if (p.readUInt32BE(0) !== 0) throw new Error('the server refused security type None');
        this.take(4);
        this.send(Buffer.from([1])); // ClientInit: shared, as the live page's noVNC asks
        this.phase = 'init';
        return true;
      case 'init': {
        if (p.length < 24 || p.length < 24 + p.readUInt32BE(20)) return false;
        this.width = p.readUInt16BE(0);
        this.height = p.readUInt16BE(2);
        this.bitsPerPixel = p[4] as number;
        this.take(24 + p.readUInt32BE(20));
        const encodings = [ENCODING_ZRLE, ENCODING_RAW];
        const setEncodings = Buffer.alloc(4 + 4 * encodings.length);
        setEncodings.writeUInt8(2, 0);
        setEncodings.writeUInt16BE(encodings.length, 2);
        encodings.forEach((e, i) => setEncodings.writeInt32BE(e, 4 + 4 * i));
        this.send(setEncodings);
        this.requestUpdate(false);
        this.phase = 'message';
        return true;
      }
      case 'message':
        return this.message(p);
      case 'rect':
        return this.rect(p);
    }
  }

  private message(p: Buffer): boolean {
    if (p.length < 1) return false;
    switch (p[0]) {
      case 0: // FramebufferUpdate: type, padding, number of rectangles
        if (p.length < 4) return false;
        this.rectsLeft = p.readUInt16BE(2);
        this.take(4);
        if (this.rectsLeft === 0) this.updateEnding = true;
        else this.phase = 'rect';
        return true;
      case 1: // SetColourMapEntries
        if (p.length < 6) return false;
        this.skip = 6 * p.readUInt16BE(4);
        this.take(6);
        return true;
      case 2: // Bell
        this.take(1);
        return true;
      case 3: // ServerCutText
        if (p.length < 8) return false;
        this.skip = p.readUInt32BE(4);
        this.take(8);
        return true;
      default:
        throw new Error(`unexpected RFB server message type ${p[0]}`);
    }
  }

  private rect(p: Buffer): boolean {
    if (p.length < 12) return false;
    const w = p.readUInt16BE(4);
    const h = p.readUInt16BE(6);
    const encoding = p.readInt32BE(8);
    const pixel = this.bitsPerPixel / 8;
    let header = 12;
    let body: number;
    if (encoding === ENCODING_RAW) body = w * h * pixel;
    else if (encoding === ENCODING_COPY_RECT) body = 4;
    else if (encoding === ENCODING_ZRLE) {
      if (p.length < 16) return false;
      header = 16;
      body = p.readUInt32BE(12);
    } else if (encoding === ENCODING_DESKTOP_SIZE || encoding === ENCODING_LAST_RECT) body = 0;
    else if (encoding === ENCODING_CURSOR) body = w * h * pixel + Math.floor((w + 7) / 8) * h;
    else throw new Error(`unexpected RFB encoding ${encoding} (asked for ZRLE and Raw only)`);
    this.take(header);
    this.skip = body;
    this.rectsLeft--;
    if (this.rectsLeft === 0 || encoding === ENCODING_LAST_RECT) {
      this.phase = 'message';
      this.updateEnding = true;
    }
    return true;
  }

  private requestUpdate(incremental: boolean): void {
    const request = Buffer.alloc(10);
    request.writeUInt8(3, 0);
    request.writeUInt8(incremental ? 1 : 0, 1);
    request.writeUInt16BE(this.width, 6);
    request.writeUInt16BE(this.height, 8);
    this.send(request);
  }

  private take(n: number): void {
    this.pending = this.pending.subarray(n);
  }
}
