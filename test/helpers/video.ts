import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import sharp from 'sharp';

/** What a recording shows, read with ffprobe and ffmpeg as a person's player would. */

const run = promisify(execFile);

/** Frame count, duration and size of a video, as ffprobe counts them (decoding every frame). */
export async function probe(file: string): Promise<{ frames: number; seconds: number; width: number; height: number; codec: string }> {
  const { stdout } = await run('ffprobe', [
    '-v',
    'error',
    '-count_frames',
    '-select_streams',
    'v:0',
    '-show_entries',
    'stream=nb_read_frames,width,height,codec_name:format=duration',
    '-of',
    'json',
    file,
  ]);
  const info = JSON.parse(stdout) as { streams: { nb_read_frames: string; width: number; height: number; codec_name: string }[]; format: { duration: string } };
  const stream = info.streams[0]!;
  return { frames: Number(stream.nb_read_frames), seconds: Number(info.format.duration), width: stream.width, height: stream.height, codec: stream.codec_name };
}

/** The mean RGB of a 100x100 square at (x, y) of the video's frame at `seconds`. */
export async function colourAt(file: string, seconds: number, x: number, y: number): Promise<[number, number, number]> {
  const png = path.join(path.dirname(file), `frame-${seconds}.png`);
  await run('ffmpeg', ['-v', 'error', '-y', '-ss', String(seconds), '-i', file, '-frames:v', '1', png]);
  const { data } = await sharp(png).extract({ left: x, top: y, width: 100, height: 100 }).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  const sum = [0, 0, 0];
  for (let i = 0; i < data.length; i += 3) for (let c = 0; c < 3; c++) sum[c]! += data[i + c]!;
  const n = data.length / 3;
  return [Math.round(sum[0]! / n), Math.round(sum[1]! / n), Math.round(sum[2]! / n)];
}
