import type { SessionAccess } from '../session-access.js';
import type { GuestTransport } from '../../transport/index.js';
import { SerialQueue } from '../../util/serial-queue.js';
import { ToolError } from '../tool-error.js';
import { textResult, type ToolResult } from '../tool-result.js';
import { listDirectory } from './directory-listing.js';
import { parseEditorInput, type EditorRequest } from './editor-input.js';
import { SftpFiles } from './sftp-files.js';
import { catN, joinLines, SNIPPET_LINES, splitLines } from './text-view.js';

/**
 * The text editor tool (text_editor_20250728, named str_replace_based_edit_tool): view,
 * create, str_replace and insert, with the behaviour and wording of Anthropic's reference
 * implementation (claude-quickstarts computer_use_demo/tools/edit.py, EditTool20250728),
 * except where it would damage the file: text is written back byte for byte (the reference
 * turns every tab of the file into spaces on each edit), and a final newline ends the last
 * line instead of counting as one more, empty line (so `view` numbers lines as `cat -n`
 * does, and inserting after the last line keeps the file's final newline).
 *
 * One command at a time per session, so that two edits of one file cannot lose either.
 */
export class EditorTool {
  constructor(private readonly sessions: SessionAccess) {}

  async call(sessionId: string, input: unknown): Promise<ToolResult> {
    // The session first: an unknown or finished session is a 404/409, whatever the input.
    const connection = this.sessions.connection(sessionId);
    const queue = await this.sessions.attachment(sessionId, 'str_replace_based_edit_tool', () => new SerialQueue());
    const request = parseEditorInput(input);
    return queue.run(async () => textResult(await perform(connection, request)));
  }
}

async function perform(connection: GuestTransport, request: EditorRequest): Promise<string> {
  const files = new SftpFiles(await connection.sftp());
  const { path } = request;
  const kind = await files.kind(path);
  if (kind === 'missing' && request.command !== 'create') {
    throw new ToolError(`The path ${path} does not exist. Please provide a valid path.`);
  }
  if (kind !== 'missing' && request.command === 'create') {
    throw new ToolError(`File already exists at: ${path}. Cannot overwrite files using command \`create\`.`);
  }
  if (kind === 'directory' && request.command !== 'view') {
    throw new ToolError(`The path ${path} is a directory and only the \`view\` command can be used on directories`);
  }
  if (kind === 'other') {
    throw new ToolError(`The path ${path} is not a regular file (a device, pipe or socket); this tool works on text files and directories.`);
  }

  switch (request.command) {
    case 'view':
      if (kind === 'directory') {
        if (request.viewRange) throw new ToolError('The `view_range` parameter is not allowed when `path` points to a directory.');
        return listDirectory(connection, path);
      }
      return view(await files.readText(path), path, request.viewRange);
    case 'create':
      await files.writeText(path, request.fileText, { create: true });
      return `File created successfully at: ${path}`;
    case 'str_replace': {
      const edit = strReplace(await files.readText(path), path, request.oldStr, request.newStr);
      await files.writeText(path, edit.text, { create: false });
      return edit.message;
    }
    case 'insert': {
      const edit = insert(await files.readText(path), path, request.insertLine, request.insertText);
      await files.writeText(path, edit.text, { create: false });
      return edit.message;
    }
  }
}

function view(text: string, path: string, range: [number, number] | undefined): string {
  const { lines } = splitLines(text);
  if (!range) return catN(lines, path);
  const [first, last] = range;
  const count = lines.length;
  const shown = `[${first}, ${last}]`;
  if (first < 1 || first > count) {
    throw new ToolError(`Invalid \`view_range\`: ${shown}. Its first element \`${first}\` should be within the range of lines of the file: [1, ${count}]`);
  }
  if (last > count) {
    throw new ToolError(
      `Invalid \`view_range\`: ${shown}. Its second element \`${last}\` should be smaller than the number of lines in the file: \`${count}\``,
    );
  }
  if (last !== -1 && last < first) {
    throw new ToolError(`Invalid \`view_range\`: ${shown}. Its second element \`${last}\` should be larger or equal than its first \`${first}\``);
  }
  return catN(lines.slice(first - 1, last === -1 ? undefined : last), path, first);
}

interface Edit {
  text: string;
  message: string;
}

function strReplace(text: string, path: string, oldStr: string, newStr: string): Edit {
  if (oldStr === '') {
    throw new ToolError('Parameter `old_str` must not be empty: give the exact text to replace, with enough of its surroundings to be unique.');
  }
  const at = occurrences(text, oldStr);
  if (at.length === 0) {
    throw new ToolError(`No replacement was performed, old_str \`${oldStr}\` did not appear verbatim in ${path}.`);
  }
  if (at.length > 1) {
    const lines = [...new Set(at.map((index) => lineOf(text, index) + 1))];
    throw new ToolError(
      `No replacement was performed. Multiple occurrences of old_str \`${oldStr}\` in lines [${lines.join(', ')}]. Please ensure it is unique`,
    );
  }
  const index = at[0] as number;
  // Spliced, not String.replace: a `$&` or `$1` in new_str must stay literal text.
  const edited = text.slice(0, index) + newStr + text.slice(index + oldStr.length);
  const line = lineOf(text, index);
  const start = Math.max(0, line - SNIPPET_LINES);
  const end = line + SNIPPET_LINES + count(newStr, '\n');
  const snippet = splitLines(edited).lines.slice(start, end + 1);
  return {
    text: edited,
    message:
      `The file ${path} has been edited. ${catN(snippet, `a snippet of ${path}`, start + 1)}` +
      'Review the changes and make sure they are as expected. Edit the file again if necessary.',
  };
}

function insert(text: string, path: string, insertLine: number, insertText: string): Edit {
  const file = splitLines(text);
  const { lines } = file;
  if (insertLine < 0 || insertLine > lines.length) {
    throw new ToolError(`Invalid \`insert_line\` parameter: ${insertLine}. It should be within the range of lines of the file: [0, ${lines.length}]`);
  }
  const inserted = insertText.split('\n');
  const edited = joinLines({ ...file, lines: [...lines.slice(0, insertLine), ...inserted, ...lines.slice(insertLine)] });
  const snippet = [...lines.slice(Math.max(0, insertLine - SNIPPET_LINES), insertLine), ...inserted, ...lines.slice(insertLine, insertLine + SNIPPET_LINES)];
  return {
    text: edited,
    message:
      `The file ${path} has been edited. ${catN(snippet, 'a snippet of the edited file', Math.max(1, insertLine - SNIPPET_LINES + 1))}` +
      'Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.',
  };
}

/** Where `needle` starts in `text`, without overlaps (as Python's str.count counts). */
function occurrences(text: string, needle: string): number[] {
  const found: number[] = [];
  for (let i = text.indexOf(needle); i !== -1; i = text.indexOf(needle, i + needle.length)) found.push(i);
  return found;
}

/** The 0-based line that the character at `index` is on. */
function lineOf(text: string, index: number): number {
  return count(text.slice(0, index), '\n');
}

function count(text: string, char: string): number {
  let n = 0;
  for (let i = text.indexOf(char); i !== -1; i = text.indexOf(char, i + 1)) n++;
  return n;
}
