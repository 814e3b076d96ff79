/**
 * A template's `files` sources, read from the template file's directory and never from outside
 * it (docs/templates.md). template-file.ts refuses absolute sources and any that climb out
 * (`a/../../x`); what is left to check is the file system: a symlink in the directory may
 * lead anywhere. Each source is opened first and its check made on what was opened (the
 * path the kernel gives for the descriptor), so nothing swapped in between the check and
 * the read can lead the read out of the directory.
 */
import { constants } from 'node:fs';
import { open, readlink, realpath } from 'node:fs/promises';
import path from 'node:path';
import { TemplateFileError, type TemplateDefinition } from './template-file.js';

/** Larger sources are refused (they go into every build's hash and image). */
export const MAX_SOURCE_BYTES = 64 * 2 ** 20;

/** The contents of the template's files, in the order of `definition.files`. */
export async function readSources(file: string, definition: TemplateDefinition): Promise<Buffer[]> {
  const dir = await realpath(path.dirname(path.resolve(file)));
  const contents: Buffer[] = [];
  for (const [index, entry] of definition.files.entries()) {
    const refuse = (why: string) => new TemplateFileError(file, [`files[${index}].source: ${entry.source} ${why}`]);
    // O_NONBLOCK: a FIFO planted as a source must not hang the build (it is refused below).
    const handle = await open(path.join(dir, entry.source), constants.O_RDONLY | constants.O_NONBLOCK).catch((err: NodeJS.ErrnoException) => {
      throw refuse(err.code === 'ENOENT' ? `does not exist (relative to ${dir})` : `cannot be read: ${err.code ?? err.message}`);
    });
    try {
      const opened = await readlink(`/proc/self/fd/${handle.fd}`);
      if (!opened.startsWith(dir + path.sep)) throw refuse(`leads outside ${dir}`);
      const info = await handle.stat();
      if (!info.isFile()) throw refuse('is not a regular file');
      if (info.size > MAX_SOURCE_BYTES) throw refuse(`is larger than ${MAX_SOURCE_BYTES / 2 ** 20} MiB`);
      // What fstat saw, not more: a file that grows meanwhile cannot take the build's memory.
      const content = Buffer.alloc(info.size);
      let filled = 0;
      while (filled < content.length) {
        const { bytesRead } = await handle.read(content, filled, content.length - filled, filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      contents.push(content.subarray(0, filled));
    } finally {
      await handle.close();
    }
  }
  return contents;
}
