import { chromium, type Browser } from 'playwright-core';
import sharp from 'sharp';

/**
 * Debian's Chromium (scripts/setup.sh installs it) driven by playwright-core: never a browser
 * download. Tests run as root, where Chromium's own sandbox cannot start: --no-sandbox (the
 * pages opened are this test's own orchestrator's).
 */
export async function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.SBX_TEST_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
}

export interface Rgba {
  width: number;
  height: number;
  pixels: Buffer;
}

/** A PNG (a page screenshot) as raw RGBA, to look at its pixels. */
export async function decodePng(png: Buffer): Promise<Rgba> {
  const { data, info } = await sharp(png).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  return { width: info.width, height: info.height, pixels: data };
}

/**
 * Where a colour appears in a window of an image: the centroid of the pixels within `tolerance`
 * of it on each channel, and how many there are (0: not there).
 */
export function findColour(
  image: Rgba,
  colour: [number, number, number],
  around: { x: number; y: number; radius: number },
  tolerance = 40,
): { x: number; y: number; count: number } {
  let sx = 0;
  let sy = 0;
  let count = 0;
  const x0 = Math.max(0, Math.floor(around.x - around.radius));
  const x1 = Math.min(image.width - 1, Math.ceil(around.x + around.radius));
  const y0 = Math.max(0, Math.floor(around.y - around.radius));
  const y1 = Math.min(image.height - 1, Math.ceil(around.y + around.radius));
  for (let y = y0; y <= y1; y++) {
    for (let x = x0; x <= x1; x++) {
      const i = (y * image.width + x) * 4;
      const near = [0, 1, 2].every((c) => Math.abs((image.pixels[i + c] as number) - colour[c]!) <= tolerance);
      if (!near) continue;
      sx += x;
      sy += y;
      count++;
    }
  }
  return count === 0 ? { x: NaN, y: NaN, count } : { x: sx / count, y: sy / count, count };
}
