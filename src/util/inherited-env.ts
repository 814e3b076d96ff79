/**
 * The environment the orchestrator passes on, as opposed to its settings (which only the
 * entry points read, see src/config.ts): what a child process inherits, and the PATH commands
 * are looked up on, as spawn itself would. Nothing here configures the orchestrator.
 */

/** This process's environment for a child, with `overrides` on top. */
export function inheritedEnv(overrides: Readonly<Record<string, string>>): NodeJS.ProcessEnv {
  return { ...process.env, ...overrides };
}

/** The directories commands are looked up in (PATH). */
export function commandSearchPath(): string {
  return process.env.PATH ?? '';
}
