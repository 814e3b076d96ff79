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
 * one), held by the session's ComputerTool and dropped with it. Entries keep their frame alive,
 * but the channel keeps the latest frame anyway, and an older one is dropped as soon as a
 * newer encoding takes its place.
 */
export class EncodeCache {
  private entries: Array<{ frame: RawFrame; key: string; image: Promise<EncodedImage> }> = [];

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
    const image = encode();
    const entry = { frame, key: name, image };
    this.entries.unshift(entry);
    this.entries.length = Math.min(this.entries.length, this.capacity);
    image.catch(() => {
      this.entries = this.entries.filter((e) => e !== entry);
    });
    return image;
  }

  get size(): number {
    return this.entries.length;
  }

  clear(): void {
    this.entries = [];
  }
}

function keyName({ choice, size, region }: EncodeKey): string {
  const quality = choice.quality ?? '';
  const scaled = size ? `${size.width}x${size.height}` : 'full';
  const area = region ? `${region.x0},${region.y0},${region.x1},${region.y1}` : 'all';
  return `${choice.format}:${quality}:${scaled}:${area}`;
}
