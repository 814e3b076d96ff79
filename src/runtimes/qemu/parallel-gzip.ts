import { Transform, type TransformCallback } from 'node:stream';
import { promisify } from 'node:util';
import { gzip, gzipSync, type ZlibOptions } from 'node:zlib';

const gzipBlock = promisify(gzip);

export interface ParallelGzipOptions {
  /** Input is cut into blocks of about this many bytes, each compressed on its own. */
  blockBytes: number;
  /** Blocks compressed at once on libuv's thread pool (the next waits for the oldest). */
  parallel: number;
  zlib: ZlibOptions;
}

/**
 * gzip whose blocks are compressed side by side on libuv's thread pool and written in order,
 * each as a member of one multi-member gzip stream (RFC 1952 allows it; gunzip reads it as
 * one). A VM's migration stream arrives faster than one thread compresses it (about 130 MB/s
 * at level 1 here): one deflate stream made the pause wait on a single core.
 */
export class ParallelGzip extends Transform {
  private held: Buffer[] = [];
  private heldBytes = 0;
  private readonly compressing: Array<Promise<Buffer>> = [];
  private members = 0;

  constructor(private readonly options: ParallelGzipOptions) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.held.push(chunk);
    this.heldBytes += chunk.length;
    this.compressWholeBlocks().then(() => done(), done);
  }

  override _flush(done: TransformCallback): void {
    if (this.heldBytes > 0) this.compress(Buffer.concat(this.held, this.heldBytes));
    this.pushUntil(0).then(() => {
      // Empty input is still a gzip stream: one empty member.
      if (this.members === 0) this.push(gzipSync(Buffer.alloc(0), this.options.zlib));
      done();
    }, done);
  }

  /** Every whole block held goes to be compressed, no more than `parallel` at once. */
  private async compressWholeBlocks(): Promise<void> {
    const { blockBytes, parallel } = this.options;
    while (this.heldBytes >= blockBytes) {
      const all = this.held.length === 1 ? (this.held[0] as Buffer) : Buffer.concat(this.held, this.heldBytes);
      this.compress(all.subarray(0, blockBytes));
      this.held = all.length > blockBytes ? [all.subarray(blockBytes)] : [];
      this.heldBytes = all.length - blockBytes;
      await this.pushUntil(parallel - 1);
    }
  }

  private compress(block: Buffer): void {
    const compressed = gzipBlock(block, this.options.zlib);
    compressed.catch(() => undefined); // awaited in order below; a stream destroyed meanwhile never asks
    this.compressing.push(compressed);
  }

  /** Pushes finished blocks, oldest first, until at most `inFlight` are still compressing. */
  private async pushUntil(inFlight: number): Promise<void> {
    while (this.compressing.length > inFlight) {
      const member = await (this.compressing.shift() as Promise<Buffer>);
      this.members++;
      this.push(member);
    }
  }
}
