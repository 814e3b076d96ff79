/**
 * Typing text that the keyboard layout has no key for (ö, 漢, 🎉) reliably.
 *
 * xdotool types such a character by binding its keysym to a spare keycode, pressing it, and
 * unbinding it straight away. A client that reads the MappingNotify late fetches the map
 * after the unbinding and sees the wrong symbol: characters get lost (seen in our tests).
 * Instead, the keysyms a text needs are bound to spare keycodes *before* xdotool runs and
 * stay bound; xdotool then finds them in the keymap and presses them like any other key.
 * Bindings are reused across actions, least recently used first out; text that needs more
 * distinct symbols than there are spare keycodes is typed in chunks.
 */

/** What the US layout types without help: printable ASCII and tab (newlines are pressed as Return). */
function isOnKeyboard(codePoint: number): boolean {
  return (codePoint >= 0x20 && codePoint <= 0x7e) || codePoint === 0x09;
}

/** The X keysym xdotool looks for: Latin-1 keysyms are the code point, others 0x01000000 + it. */
export function keysymFor(codePoint: number): number {
  return codePoint >= 0xa0 && codePoint <= 0xff ? codePoint : 0x01000000 + codePoint;
}

/** Parses `xmodmap -pke`: the keycodes with no keysym at all. */
export function spareKeycodes(xmodmapPke: string): number[] {
  const spare: number[] = [];
  for (const line of xmodmapPke.split('\n')) {
    const match = /^keycode\s+(\d+)\s*=\s*$/.exec(line.trim());
    if (match) spare.push(Number(match[1]));
  }
  return spare.filter((k) => k > 8);
}

export interface TypingPlan {
  /** The text in order, cut so that each chunk's extra symbols fit the spare keycodes. */
  chunk: string;
  /** xmodmap expressions to run before typing the chunk ('' when nothing is missing). */
  bindings: string;
}

export class KeymapBinder {
  /** code point -> keycode, in least-recently-used-first order. */
  private readonly bound = new Map<number, number>();
  private readonly pool: number[];

  /**
   * @param spare keycodes with no symbol. The highest is left unbound: it is xdotool's
   * scratch keycode, and the one sbx-input binds a pressed keysym that no key carries to.
   */
  constructor(spare: number[]) {
    this.pool = spare.slice(0, Math.max(0, spare.length - 1));
  }

  get capacity(): number {
    return this.pool.length;
  }

  /** Splits the text into chunks and says what to bind before each; updates the bindings. */
  plan(text: string): TypingPlan[] {
    const plans: TypingPlan[] = [];
    let chunk = '';
    let needed = new Set<number>();
    const flush = () => {
      if (chunk) plans.push({ chunk, bindings: this.bind(needed) });
      chunk = '';
      needed = new Set();
    };
    for (const ch of text) {
      const cp = ch.codePointAt(0) as number;
      if (!isOnKeyboard(cp) && !needed.has(cp)) {
        if (this.capacity === 0) throw new Error('the guest keyboard has no spare keycodes to type non-ASCII text');
        if (needed.size === this.capacity) flush();
        needed.add(cp);
      }
      chunk += ch;
    }
    flush();
    return plans;
  }

  /** Binds the symbols of one chunk, evicting the least recently used others. */
  private bind(needed: Set<number>): string {
    const lines: string[] = [];
    for (const cp of needed) {
      const keycode = this.bound.get(cp);
      if (keycode !== undefined) {
        // Mark as recently used.
        this.bound.delete(cp);
        this.bound.set(cp, keycode);
      }
    }
    for (const cp of needed) {
      if (this.bound.has(cp)) continue;
      let keycode = this.pool.find((k) => ![...this.bound.values()].includes(k));
      if (keycode === undefined) {
        const victim = [...this.bound.keys()].find((c) => !needed.has(c)) as number;
        keycode = this.bound.get(victim) as number;
        this.bound.delete(victim);
      }
      this.bound.set(cp, keycode);
      const keysym = `0x${keysymFor(cp).toString(16)}`;
      // The same symbol on every level, so Shift or Lock cannot change it.
      lines.push(`keycode ${keycode} = ${keysym} ${keysym}`);
    }
    return lines.length ? lines.join('\n') + '\n' : '';
  }
}
