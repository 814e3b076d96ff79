/**
 * Quotes one argument for the POSIX shell that sshd runs a command with. Inside single
 * quotes nothing is special, and a single quote is written as '\'' : every byte arrives
 * literally. NUL cannot be carried in an argument at all, so it is refused.
 */
export function shellQuote(arg: string): string {
  if (arg.includes('\0')) throw new Error('an argument cannot contain a NUL character');
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) && !arg.startsWith('-')) return arg;
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** Builds a guest command line from an argument vector. */
export function commandLine(argv: readonly string[]): string {
  return argv.map(shellQuote).join(' ');
}
