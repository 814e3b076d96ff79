import { InvalidRequestError } from '../errors.js';
import { GUEST_USER } from '../guest/contract.js';
import { commandLine, shellQuote } from '../transport/quote.js';

/** What POST /v1/sessions/:id/processes accepts, once checked. */
export interface ProcessSpec {
  /** The program and its arguments, each passed as one argument (never parsed by a shell)... */
  argv?: string[];
  /** ... or the user's own shell command, run as `bash -lc <cmd>`. Exactly one of the two. */
  cmd?: string;
  cwd?: string;
  env: Array<[string, string]>;
  /** Whether standard input stays open for .../stdin (otherwise it is at EOF from the start). */
  stdin: boolean;
  /** A terminal of this size (stdin stays open, stdout and stderr are the terminal). */
  pty?: { cols: number; rows: number };
  timeoutSeconds?: number;
}

/** Environment names: a shell variable's, nothing that a shell or env(1) could read as anything else. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
export const MAX_ARGV = 1024;
/** Bytes of argv, cmd and env together: well under the guest's ARG_MAX and sshd's packet limit. */
export const MAX_COMMAND_BYTES = 128 * 1024;
export const MAX_ENV = 128;
export const MAX_TIMEOUT_SECONDS = 7 * 24 * 3600;
const MAX_PATH = 4096;
const FIELDS = new Set(['argv', 'cmd', 'cwd', 'env', 'user', 'stdin', 'pty', 'timeoutSeconds']);

/**
 * Checks a start request field by field; every refusal is a 400 naming the field. Nothing of
 * it is interpreted here: strings are only measured and checked for NUL, which no argument,
 * path or variable can carry.
 */
export function parseProcessSpec(body: unknown): ProcessSpec {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidRequestError('the body must be a JSON object');
  const input = body as Record<string, unknown>;
  for (const key of Object.keys(input)) if (!FIELDS.has(key)) throw new InvalidRequestError(`unknown field "${key}"; the fields are ${[...FIELDS].join(', ')}`);
  const { argv, cmd } = input;
  if ((argv === undefined) === (cmd === undefined)) throw new InvalidRequestError('give exactly one of argv (an array of strings) or cmd (a shell command)');
  let bytes = 0;
  const spec: ProcessSpec = { env: [], stdin: false };
  if (argv !== undefined) {
    if (!Array.isArray(argv) || argv.length === 0 || argv.length > MAX_ARGV) throw new InvalidRequestError(`argv must be an array of 1 to ${MAX_ARGV} strings`);
    spec.argv = argv.map((arg, i) => {
      if (typeof arg !== 'string') throw new InvalidRequestError(`argv[${i}] must be a string`);
      noNul(arg, `argv[${i}]`);
      bytes += Buffer.byteLength(arg);
      return arg;
    });
    if ((spec.argv[0] as string).length === 0) throw new InvalidRequestError('argv[0] must name a program');
  } else {
    if (typeof cmd !== 'string' || cmd.length === 0) throw new InvalidRequestError('cmd must be a non-empty string');
    noNul(cmd, 'cmd');
    bytes += Buffer.byteLength(cmd);
    spec.cmd = cmd;
  }
  if (input.cwd !== undefined) {
    const cwd = input.cwd;
    if (typeof cwd !== 'string' || !cwd.startsWith('/') || cwd.length > MAX_PATH)
      throw new InvalidRequestError(`cwd must be an absolute path of at most ${MAX_PATH} characters`);
    noNul(cwd, 'cwd');
    spec.cwd = cwd;
  }
  if (input.env !== undefined) {
    const env = input.env;
    if (typeof env !== 'object' || env === null || Array.isArray(env)) throw new InvalidRequestError('env must be an object of NAME: "value" strings');
    const entries = Object.entries(env as Record<string, unknown>);
    if (entries.length > MAX_ENV) throw new InvalidRequestError(`env may name at most ${MAX_ENV} variables`);
    for (const [name, value] of entries) {
      if (!ENV_NAME.test(name))
        throw new InvalidRequestError(
          `env: ${JSON.stringify(name.slice(0, 64))} is not a variable name (letters, digits and _, not starting with a digit, at most 128)`,
        );
      if (typeof value !== 'string') throw new InvalidRequestError(`env.${name} must be a string`);
      noNul(value, `env.${name}`);
      bytes += name.length + Buffer.byteLength(value);
      spec.env.push([name, value]);
    }
  }
  if (bytes > MAX_COMMAND_BYTES) throw new InvalidRequestError(`argv, cmd and env together must be at most ${MAX_COMMAND_BYTES} bytes`);
  if (input.user !== undefined && input.user !== GUEST_USER)
    throw new InvalidRequestError(`user must be "${GUEST_USER}": processes run as the sandbox's user, never as root`);
  if (input.stdin !== undefined) {
    if (typeof input.stdin !== 'boolean') throw new InvalidRequestError('stdin must be a boolean (true: keep standard input open for .../stdin)');
    spec.stdin = input.stdin;
  }
  if (input.pty !== undefined && input.pty !== false) {
    spec.pty = parsePty(input.pty);
    spec.stdin = true;
  }
  if (input.timeoutSeconds !== undefined) {
    const t = input.timeoutSeconds;
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 1 || t > MAX_TIMEOUT_SECONDS)
      throw new InvalidRequestError(`timeoutSeconds must be a whole number from 1 to ${MAX_TIMEOUT_SECONDS}`);
    spec.timeoutSeconds = t;
  }
  return spec;
}

/** `true` (80x24) or {cols, rows}. */
export function parsePty(value: unknown, field = 'pty'): { cols: number; rows: number } {
  if (value === true) return { cols: 80, rows: 24 };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidRequestError(`${field} must be true or {cols, rows}`);
  const { cols, rows, ...rest } = value as Record<string, unknown>;
  if (Object.keys(rest).length > 0) throw new InvalidRequestError(`${field} takes only cols and rows`);
  return { cols: dimension(cols, `${field}.cols`), rows: dimension(rows, `${field}.rows`) };
}

export function dimension(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 1000)
    throw new InvalidRequestError(`${field} must be a whole number from 1 to 1000`);
  return value;
}

function noNul(value: string, field: string): void {
  if (value.includes('\0')) throw new InvalidRequestError(`${field} must not contain a NUL character`);
}

/** The first line the guest sends, on stderr (on the terminal with a pty), before the program runs. */
export const PID_LINE = 'SBX-PID ';
/** Instead of it when cwd is not a directory the user can enter. */
export const NO_CWD_LINE = 'SBX-NO-CWD';

/**
 * The guest command line (run by the user's login shell, sbx-user-shell, as `bash -c`). Every
 * client string is one single-quoted word (shellQuote): argv elements are arguments of
 * `exec`, the cmd is one argument of `bash -lc`, cwd one argument of `cd`, env values the
 * right-hand side of an assignment whose name matched ENV_NAME. The shell first says its pid
 * (which the program keeps: exec), so that signals reach the process group sshd made for it
 * (sshd starts every command in a session of its own: its pid is its process group's id).
 */
export function guestCommand(spec: ProcessSpec, display: number): string {
  if (!Number.isInteger(display) || display < 0) throw new Error(`bad display number ${display}`);
  const out = spec.pty ? '' : ' >&2';
  const parts = [`cd -- ${shellQuote(spec.cwd ?? `/home/${GUEST_USER}`)} 2>/dev/null || { printf '${NO_CWD_LINE}\\n'${out}; exit 126; }`];
  // The pid line before anything the request can make the shell print (an export of a
  // read-only name complains): what follows it is the process's own output.
  parts.push(`printf '${PID_LINE}%d\\n' "$$"${out}`);
  parts.push(`export DISPLAY=:${display} LANG=C.UTF-8`);
  for (const [name, value] of spec.env) {
    if (!ENV_NAME.test(name)) throw new Error(`bad variable name ${name}`);
    parts.push(`export ${name}=${shellQuote(value)}`);
  }
  parts.push(spec.argv ? `exec -- ${commandLine(spec.argv)}` : `exec -- bash -lc ${shellQuote(spec.cmd as string)}`);
  return parts.join('; ');
}
