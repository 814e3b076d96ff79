/**
 * What of an nftables table (nft's JSON listing) must stay as we installed it, told apart
 * from what changes by itself: rule handles are the kernel's numbering, counters count, and
 * the elements of the per-session sets change with every create and destroy (those are
 * compared to the sessions we admitted, not to the listing at install time).
 */
export interface TableShape {
  /** Tables, sets, chains and rules, with handles, counter values and per-session elements left out. */
  structure: string;
  /** The elements of each per-session set, as sorted `veth . address` strings. */
  elements: Record<string, string[]>;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Removes what the kernel numbers or counts by itself, everywhere in an object. */
function withoutVolatile(value: Json): Json {
  if (Array.isArray(value)) return value.map(withoutVolatile);
  if (value === null || typeof value !== 'object') return value;
  const out: { [key: string]: Json } = {};
  for (const [key, inner] of Object.entries(value)) {
    if (key === 'handle') continue;
    // An anonymous counter's packets and bytes; a rule that lost its counter still differs.
    out[key] = key === 'counter' ? null : withoutVolatile(inner);
  }
  return out;
}

/** `{concat: ["sbx-x", "10.0.0.2"]}` (or a bare value) as `sbx-x . 10.0.0.2`. */
export function elementKey(element: unknown): string {
  const concat = (element as { concat?: unknown[] } | null)?.concat;
  return Array.isArray(concat) ? concat.map(String).join(' . ') : JSON.stringify(element);
}

/** The shape of a listed table; `sessionSets` names the sets whose elements are per-session. */
export function tableShape(objects: readonly unknown[], sessionSets: readonly string[]): TableShape {
  const elements: Record<string, string[]> = Object.fromEntries(sessionSets.map((name) => [name, []]));
  const kept: Json[] = [];
  for (const object of objects as Json[]) {
    const set = (object as { set?: { name?: string; elem?: unknown[] } } | null)?.set;
    if (set && typeof set.name === 'string' && sessionSets.includes(set.name)) {
      elements[set.name] = (set.elem ?? []).map(elementKey).sort();
      const { elem: _elements, ...rest } = set;
      kept.push(withoutVolatile({ set: rest as Json }));
      continue;
    }
    kept.push(withoutVolatile(object));
  }
  return { structure: JSON.stringify(kept), elements };
}

/**
 * How `actual` differs from what it must be, in words for the log; undefined when it is as
 * it must be.
 */
export function describeDrift(actual: TableShape, installed: string, expected: Record<string, string[]>): string | undefined {
  if (actual.structure !== installed) return 'its chains, rules or sets differ from what was installed';
  for (const [set, want] of Object.entries(expected)) {
    const have = actual.elements[set] ?? [];
    const sortedWant = [...want].sort();
    const missing = sortedWant.filter((e) => !have.includes(e));
    const extra = have.filter((e) => !sortedWant.includes(e));
    if (missing.length > 0 || extra.length > 0) return `set ${set}: ${missing.length} element(s) missing, ${extra.length} not ours`;
  }
  return undefined;
}
