/**
 * Measures the screenshot encoders on real screens: CPU per encode, bytes, and for lossy
 * settings the PSNR against the exact pixels. The screens are PNGs of real sandboxes (e.g.
 * `node dist/cli/main.js screenshot <id> -f png -o xterm.png`); each is decoded once and
 * encoded from raw RGB, as the orchestrator does. Used to choose src/computer/encoders.ts's
 * settings; the figures are in docs/benchmarks.md.
 *
 *   node --import tsx scripts/measure-encoders.ts minimal.png xterm.png xterm-1920.png
 */
import { basename } from 'node:path';
import sharp, { type Sharp } from 'sharp';

interface Setting {
  name: string;
  encode: (image: Sharp) => Sharp;
}

const settings: Setting[] = [
  ...[0, 1, 2, 3, 6, 9].flatMap((level) =>
    [false, true].map((adaptiveFiltering) => ({
      name: `png level ${level}${adaptiveFiltering ? ' adaptive filter' : ''}`,
      encode: (i: Sharp) => i.png({ compressionLevel: level, adaptiveFiltering }),
    })),
  ),
  { name: 'png palette (256 colours)', encode: (i) => i.png({ palette: true, compressionLevel: 1 }) },
  ...[60, 80, 90].flatMap((quality) =>
    (['4:2:0', '4:4:4'] as const).map((chromaSubsampling) => ({
      name: `jpeg ${quality} ${chromaSubsampling}`,
      encode: (i: Sharp) => i.jpeg({ quality, chromaSubsampling }),
    })),
  ),
  { name: 'jpeg 80 4:4:4 mozjpeg', encode: (i) => i.jpeg({ quality: 80, chromaSubsampling: '4:4:4', mozjpeg: true }) },
  ...[0, 2, 4].map((effort) => ({ name: `webp 80 effort ${effort}`, encode: (i: Sharp) => i.webp({ quality: 80, effort }) })),
  ...[0, 1, 4].map((effort) => ({ name: `webp lossless effort ${effort}`, encode: (i: Sharp) => i.webp({ lossless: true, effort }) })),
];

const RUNS = Number(process.env.RUNS ?? 10);

function psnr(a: Buffer, b: Buffer): number {
  let squared = 0;
  for (let i = 0; i < a.length; i++) squared += (a[i]! - b[i]!) ** 2;
  return squared === 0 ? Infinity : 10 * Math.log10((255 * 255 * a.length) / squared);
}

async function main(): Promise<void> {
  // One libvips thread: CPU per encode, as one of several sessions on a busy host would cost.
  sharp.concurrency(1);
  sharp.cache(false);
  for (const file of process.argv.slice(2)) {
    const { data: rgb, info } = await sharp(file).removeAlpha().raw().toBuffer({ resolveWithObject: true });
    const raw = { raw: { width: info.width, height: info.height, channels: 3 as const } };
    console.log(`\n${basename(file)} (${info.width}x${info.height}, raw RGB ${(rgb.length / 1024).toFixed(0)} KiB)\n`);
    console.log('| setting | CPU ms / encode | KiB | PSNR dB |');
    console.log('| --- | ---: | ---: | ---: |');
    for (const setting of settings) {
      await setting.encode(sharp(rgb, raw)).toBuffer(); // warm-up
      const cpu = process.cpuUsage();
      let bytes = Buffer.alloc(0);
      for (let run = 0; run < RUNS; run++) bytes = await setting.encode(sharp(rgb, raw)).toBuffer();
      const used = process.cpuUsage(cpu);
      const ms = (used.user + used.system) / 1000 / RUNS;
      const decoded = await sharp(bytes).removeAlpha().raw().toBuffer();
      const db = psnr(decoded, rgb);
      console.log(`| ${setting.name} | ${ms.toFixed(1)} | ${(bytes.length / 1024).toFixed(0)} | ${db === Infinity ? 'exact' : db.toFixed(1)} |`);
    }
  }
}

await main();
