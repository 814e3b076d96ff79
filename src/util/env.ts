/**
 * Reading settings from an environment: the parsers every part's `fromEnv` shares, so that a
 * variable means the same thing, and is refused in the same words, wherever it is read.
 * These take the environment as an argument: only the entry points (src/cli/main.ts,
 * src/bench/main.ts) hand them the process's own.
 */

/** An environment: the process's own at the entry points, a literal in tests. */
export type Env = Readonly<Record<string, string | undefined>>;

export interface ScreenSize {
  width: number;
  height: number;
}

/** A variable's text, or `fallback` when it is unset or empty. */
export function envString(env: Env, name: string, fallback: string): string {
  return env[name] || fallback;
}

/** A variable's text, or undefined when it is unset or empty. */
export function envOptional(env: Env, name: string): string | undefined {
  return env[name] || undefined;
}

/** An integer variable, or `fallback` when it is unset or empty. */
export function envInt(name: string, fallback: number, env: Env): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value)) throw new Error(`${name} must be an integer, got "${raw}"`);
  return value;
}

/** `value`, or an error naming the variable when it is below 1. */
export function positive(name: string, value: number): number {
  return atLeast(name, value, 1);
}

/** `value`, or an error naming the variable when it is below `min`. */
export function atLeast(name: string, value: number, min: number): number {
  if (value < min) throw new Error(`${name} must be at least ${min}, got ${value}`);
  return value;
}

/** An integer variable that may be 0 (often: no limit), never negative. */
export function envNonNegative(name: string, fallback: number, env: Env): number {
  const value = envInt(name, fallback, env);
  if (value < 0) throw new Error(`${name} must be 0 or more, got ${value}`);
  return value;
}

/** An `on` / `off` variable. */
export function envOnOff(name: string, fallback: boolean, env: Env): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw === 'on') return true;
  if (raw === 'off') return false;
  throw new Error(`${name} must be on or off, got "${raw}"`);
}

/** One of `choices`, or `fallback` when unset or empty. */
export function envChoice<T extends string>(name: string, choices: readonly T[], fallback: T, env: Env): T {
  const raw = env[name] || fallback;
  if (!(choices as readonly string[]).includes(raw)) throw new Error(`${name} must be one of ${choices.join(', ')}, got "${raw}"`);
  return raw as T;
}

/**
 * "1024x768" -> { width, height }, within the sizes a create may ask for (api/schemas.ts).
 * The one parser of screen sizes: the warm pool's and the Firecracker template's.
 */
export function parseScreenSize(text: string, what: string): ScreenSize {
  const match = /^(\d{2,5})x(\d{2,5})$/.exec(text);
  const size = match && { width: Number(match[1]), height: Number(match[2]) };
  if (!size || size.width < 320 || size.height < 320 || size.width > 3840 || size.height > 3840) {
    throw new Error(`${what} must look like 1024x768 (each side 320 to 3840), got "${text}"`);
  }
  return size;
}
