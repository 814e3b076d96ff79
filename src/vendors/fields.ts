import { parseAction, type ComputerAction } from '../computer/actions.js';
import type { Scaler } from '../computer/scaling.js';
import { InvalidRequestError } from '../errors.js';

/**
 * Checks shared by the vendor adapters: a call's object, its fields by name, and bounded
 * integers. Anything else (a string where a number goes, NaN, nested junk, an unknown
 * field) is refused by name before an action runs.
 */
export type Fields = Record<string, unknown>;

export function objectOf(value: unknown, field: string): Fields {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidRequestError(`${field} must be a JSON object`);
  return value as Fields;
}

/** Refuses any field of `body` not in `allowed`, and a missing one of `required`. */
export function onlyFields(body: Fields, where: string, required: readonly string[], optional: readonly string[] = []): void {
  for (const field of Object.keys(body)) {
    if (!required.includes(field) && !optional.includes(field)) throw new InvalidRequestError(`${where}.${field.slice(0, 40)} is not accepted`);
  }
  for (const field of required) {
    if (body[field] === undefined) throw new InvalidRequestError(`${where}.${field} is required`);
  }
}

export function integer(value: unknown, field: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value))
    throw new InvalidRequestError(`${field} must be an integer, got ${JSON.stringify(value)?.slice(0, 40)}`);
  if (value < min || value > max) throw new InvalidRequestError(`${field}=${value} is out of range (${min} to ${max})`);
  return value;
}

export function boolean(value: unknown, field: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new InvalidRequestError(`${field} must be true or false, got ${JSON.stringify(value)?.slice(0, 40)}`);
  return value;
}

/** Free text the vendor adds for its own sake (Gemini's intent): bounded, otherwise ignored. */
export function ignoredText(value: unknown, field: string, maxLength = 4_000): void {
  if (value === undefined) return;
  const text = JSON.stringify(value);
  if (text.length > maxLength) throw new InvalidRequestError(`${field} is too long (at most ${maxLength} characters as JSON)`);
}

/** Text to type, checked as the computer tool's `type` checks it (length, NUL), named as the vendor's field. */
export function typedText(value: unknown, field: string, scaler: Scaler): ComputerAction {
  try {
    return parseAction({ action: 'type', text: value }, scaler);
  } catch (err) {
    if (err instanceof InvalidRequestError) throw new InvalidRequestError(err.message.replace(/^text\b/, field));
    throw err;
  }
}
