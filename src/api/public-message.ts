/**
 * What a 5xx answer may say of its error. The messages of server-side failures are written
 * for the operator: they carry a runtime's last error, where a console log was kept, the
 * guest command that timed out, the console's last lines. The client gets the gist (the
 * first line, with those asides taken out) and a request id; the log line of that request
 * id has everything (api/errors.ts). 4xx messages are not passed through this: they are
 * about the client's own input and name its fields.
 */
const MAX_LENGTH = 300;

/** An absolute path, after a start of text, a space, a quote, "=" or ":". */
const ABSOLUTE_PATH = /(^|[\s"'=:,])\/[^\s"',;)]*/g;
/** A parenthesised aside that holds a path or another error: the operator's detail. */
const DETAIL_ASIDE = /\s*\([^()]*(?:\/|error|exit|signal|console|log)[^()]*\)/gi;
/** `command "..."`: a command line sent to the guest. */
const QUOTED_COMMAND = /(command)\s+"[^"]*"?/gi;

export function publicSummary(message: string): string {
  let text = message.split('\n', 1)[0] ?? '';
  for (let before = ''; before !== text;) {
    before = text;
    text = text.replace(DETAIL_ASIDE, '');
  }
  text = text
    .replace(QUOTED_COMMAND, '$1')
    .replace(/;\s*see\s.*$/i, '')
    .replace(ABSOLUTE_PATH, '$1<path>')
    .trim();
  if (text === '') return 'the request failed';
  return text.length > MAX_LENGTH ? `${text.slice(0, MAX_LENGTH - 3)}...` : text;
}
