/** How a JSON value reads in an error message: `number 5`, `string "abc"`, `an array`, `null`. */
export function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  return `${typeof value} ${JSON.stringify(value).slice(0, 40)}`;
}
