/** The snippet around an edit shows this many lines before and after it, as in the reference. */
export const SNIPPET_LINES = 4;
/** Longer views are cut, as the reference's maybe_truncate does (16,000 characters). */
export const MAX_VIEW_CHARS = 16_000;

/**
 * A file's text as lines. A final newline ends the last line rather than starting an empty
 * one (as `cat -n` and `wc -l` count), and is remembered so that an edit keeps it.
 */
export interface Lines {
  lines: string[];
  finalNewline: boolean;
}

export function splitLines(text: string): Lines {
  // An empty file gets a final newline once something is inserted into it.
  if (text === '') return { lines: [], finalNewline: true };
  const finalNewline = text.endsWith('\n');
  return { lines: (finalNewline ? text.slice(0, -1) : text).split('\n'), finalNewline };
}

export function joinLines({ lines, finalNewline }: Lines): string {
  if (lines.length === 0) return '';
  return lines.join('\n') + (finalNewline ? '\n' : '');
}

/**
 * "Here's the result of running `cat -n` on ...": the lines numbered from `firstLine` as
 * `cat -n` prints them (six columns, a tab). Tabs are shown as they are, so that what the
 * model copies into old_str matches the file.
 */
export function catN(lines: string[], descriptor: string, firstLine = 1): string {
  const numbered = lines.map((line, i) => `${String(i + firstLine).padStart(6)}\t${line}`).join('\n');
  return `Here's the result of running \`cat -n\` on ${descriptor}:\n${clipText(numbered, 'lines')}\n`;
}

/** Cuts text longer than MAX_VIEW_CHARS at a line end, and says so and how to see the rest. */
export function clipText(text: string, what: 'lines' | 'entries'): string {
  if (text.length <= MAX_VIEW_CHARS) return text;
  const cut = text.lastIndexOf('\n', MAX_VIEW_CHARS);
  const kept = text.slice(0, cut > 0 ? cut : MAX_VIEW_CHARS);
  const hidden = text
    .slice(kept.length)
    .split('\n')
    .filter((l) => l !== '').length;
  const how =
    what === 'lines'
      ? 'View the rest with `view_range`, or find the lines you need with `grep -n` in the bash tool.'
      : 'Look deeper with `find` or `ls` in the bash tool.';
  return `${kept}\n<response clipped: ${hidden} more ${what} not shown. ${how}>`;
}
