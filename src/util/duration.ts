const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 };

/**
 * A duration as an operator types it: a whole number and a unit, `90s`, `15m`, `12h`, `30d`,
 * `2w`. Returns seconds; anything else is an error that says what is accepted.
 */
export function parseDuration(text: string): number {
  const match = /^(\d{1,9})([smhdw])$/.exec(text.trim());
  const seconds = match ? Number(match[1]) * (UNIT_SECONDS[match[2] as string] as number) : 0;
  if (seconds <= 0) throw new Error(`a duration is a positive whole number and a unit (s, m, h, d, w), e.g. 30d or 12h; got "${text}"`);
  return seconds;
}
