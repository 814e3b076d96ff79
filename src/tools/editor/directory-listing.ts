import { commandLine } from '../../transport/quote.js';
import type { GuestTransport } from '../../transport/index.js';
import { ToolError } from '../tool-error.js';
import { clipText } from './text-view.js';

const LISTING_TIMEOUT_MS = 30_000;
const MAX_LISTING_BYTES = 8 * 1024 * 1024;

/**
 * `view` of a directory: what is in it up to two levels deep, hidden entries left out, as
 * the reference tool shows it. The reference runs `find PATH -maxdepth 2 -not -path '*\/.*'`,
 * which lists nothing at all under a hidden directory such as ~/.config; pruning names that
 * start with a dot below the starting point does what was meant. The path is one quoted
 * argument; names come back NUL-separated, so none can break the list apart.
 */
export async function listDirectory(connection: GuestTransport, path: string): Promise<string> {
  const argv = ['find', path, '-mindepth', '1', '-maxdepth', '2', '-name', '.*', '-prune', '-o', '-print0'];
  let stdout: Buffer;
  let stderr: Buffer;
  try {
    ({ stdout, stderr } = await connection.exec(commandLine(argv), { timeoutMs: LISTING_TIMEOUT_MS, maxOutputBytes: MAX_LISTING_BYTES }));
  } catch (err) {
    throw new ToolError(`Ran into ${(err as Error).message} while listing ${path}; use the bash tool (ls, find) to look at parts of it.`);
  }
  const entries = stdout
    .toString('utf8')
    .split('\0')
    .filter((entry) => entry !== '')
    .sort();
  const problems = stderr.toString('utf8').trim();
  const listing = clipText([path, ...entries].join('\n'), 'entries');
  return `Here's the files and directories up to 2 levels deep in ${path}, excluding hidden items:\n${listing}\n` + (problems ? `${problems}\n` : '');
}
