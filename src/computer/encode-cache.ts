import type { RawFrame } from './capture-channel.js';
import type { Region } from './frame-image.js';
import type { Size } from './scaling.js';
import type { EncodedImage, ScreenshotFormat } from './screenshot-format.js';

/** What an encoding depends on besides the frame. */
export interface EncodeKey {
  choice: ScreenshotFormat;
  size?: Size;
  region?: Region;
}

/**
 * The last few images encoded for one session. The capture channel hands back the very same
 * RawFrame object when the screen has not changed (and a new one whenever it has: a frame is
 * never modified once handed out), so a frame object plus the encoding's parameters names an
 * image exactly: a static screen is encoded once, however often it is asked for.
 *
 * Bounded to `capacity` entries (a few: e.g. the scaled screenshot in two formats and a full
 * one), and to one frame's worth of encoded bytes (a screen of noise encodes to about its raw
 * size, so four images could otherwise triple what a session holds); held by the session's
 * ComputerTool and dropped with it. Entries keep their frame alive, but the channel keeps the
 * latest frame anyway, and an older one's entries go as soon as a newer frame is encoded.
 */
export class EncodeCache {
  private entries: Entry[] = [];

  constructor(private readonly capacity = 4) {}

  /**
   * The image of `frame` for `key`, encoded by `encode` unless it already was. Concurrent
   * requests for the same image share one encoding; a failed encoding is not kept.
   */
  get(frame: RawFrame, key: EncodeKey, encode: () => Promise<EncodedImage>): Promise<EncodedImage> {
    const name = keyName(key);
    const found = this.entries.findIndex((e) => e.frame === frame && e.key === name);
    if (found >= 0) {
      const [entry] = this.entries.splice(found, 1);
      this.entries.unshift(entry!); // most recently used first
      return entry!.image;
    }
    // Entries of older frames are never asked for again once a newer frame exists: dropped now.
    this.entries = this.entries.filter((e) => e.frame === frame);
    const entry: Entry = { frame, key: name, image: encode(), bytes: 0 };
    this.entries.unshift(entry);
    this.entries.length = Math.min(this.entries.length, this.capacity);
    entry.image.then(
      (image) => {
        entry.bytes = image.data.length;
        this.trimToBudget(frame.stride * frame.height);
      },
      () => {
        this.entries = this.entries.filter((e) => e !== entry);
      },
    );
    return entry.image;
  }

  /** Drops the least recently used images (never the newest) until their bytes fit `budget`. */
  private trimToBudget(budget: number): void {
    let total = this.entries.reduce((sum, e) => sum + e.bytes, 0);
    while (total > budget && this.entries.length > 1) total -= this.entries.pop()!.bytes;
  }

  get size(): number {
    return this.entries.length;
  }

  clear(): void {
    this.entries = [];
  }
}

interface Entry {
  frame: RawFrame;
  key: string;
  image: Promise<EncodedImage>;
  /** The encoded size, once known (0 while encoding). */
  bytes: number;
}

function keyName({ choice, size, region }: EncodeKey): string {
  const quality = choice.quality ?? '';
  const scaled = size ? `${size.width}x${size.height}` : 'full';
  const area = region ? `${region.x0},${region.y0},${region.x1},${region.y1}` : 'all';
  return `${choice.format}:${quality}:${scaled}:${area}`;
}
