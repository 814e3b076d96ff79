import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Command } from 'commander';
import type { SandboxClient } from '../client/index.js';
import { downloadRecording, recordingStatus, recordingSubtitles, startRecording, stopRecording } from '../client/recording.js';

/**
 * `sbx recording <id> [-o file]`: download a session's video (also after it ended);
 * `--start`, `--stop` and `--status` drive and describe the recording instead.
 */
export function recordingCommand(client: () => SandboxClient): Command {
  return new Command('recording')
    .argument('<id>', 'session id')
    .description("a session's screen recording: download it (MP4), or --start / --stop / --status it")
    .option('-o, --output <file>', 'where to write the video (default recording-<id>.mp4)')
    .option('--subtitles <file>', "also write the agent's actions as WebVTT subtitles here")
    .option('--start', 'start recording the session')
    .option('--stop', 'stop recording (the file is complete once this returns)')
    .option('--status', "print the recording's status")
    .action(async (id: string, opts: { output?: string; subtitles?: string; start?: boolean; stop?: boolean; status?: boolean }) => {
      const api = client();
      if (opts.start || opts.stop || opts.status) {
        const status = opts.start ? await startRecording(api, id) : opts.stop ? await stopRecording(api, id) : await recordingStatus(api, id);
        console.log(JSON.stringify(status, null, 2));
        return;
      }
      const output = opts.output ?? `recording-${id}.mp4`;
      await writeFile(output, await downloadRecording(api, id));
      console.log(path.resolve(output));
      if (opts.subtitles) {
        await writeFile(opts.subtitles, await recordingSubtitles(api, id));
        console.log(path.resolve(opts.subtitles));
      }
    });
}
