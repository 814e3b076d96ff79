/**
 * The grabber's merging of damaged rectangles (src/guest/files/sbx-capture, run by the
 * host's python3, -B: no __pycache__ in src/guest/files): whatever XDamage reports, what it sends covers every damaged pixel, has
 * no two rectangles overlapping (the host refuses that) and at most MAX_RECTS of them.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { MAX_RECTS } from '../../src/computer/damage-rects.js';

const HELPER = path.resolve(import.meta.dirname, '../../src/guest/files/sbx-capture');

const CHECK = `
import json, random, sys
from importlib.machinery import SourceFileLoader
m = SourceFileLoader("sbx_capture", sys.argv[1]).load_module()
random.seed(13)
cases = {
    "one rectangle": [(0, 0, 1024, 768)],
    "overlapping pair": [(0, 0, 100, 100), (50, 50, 150, 150)],
    "text lines": [(x * 8, y * 13, x * 8 + 8, y * 13 + 13) for y in range(0, 40, 3) for x in range(0, 100, 7)][:128],
    "scattered grid": [(x * 30, y * 30, x * 30 + 5, y * 30 + 5) for y in range(25) for x in range(30)][:128],
}
for n in (10, 60, 128):
    rects = []
    for _ in range(n):
        x, y = random.randrange(1000), random.randrange(760)
        rects.append((x, y, min(1024, x + random.randrange(1, 300)), min(768, y + random.randrange(1, 200))))
    cases["random %d" % n] = rects
out = {}
for name, rects in cases.items():
    merged = m.merge(rects)
    out[name] = {
        "count": len(merged),
        "overlap": any(m.overlap(a, b) for i, a in enumerate(merged) for b in merged[i + 1:]),
        "covered": all(any(o[0] <= r[0] and o[1] <= r[1] and o[2] >= r[2] and o[3] >= r[3] for o in merged) for r in rects),
        "max": m.MAX_RECTS,
    }
print(json.dumps(out))
`;

describe("the grabber's merging of damaged rectangles", () => {
  const results = JSON.parse(execFileSync('python3', ['-I', '-B', '-c', CHECK, HELPER], { encoding: 'utf8' })) as Record<
    string,
    { count: number; overlap: boolean; covered: boolean; max: number }
  >;
  for (const [name, result] of Object.entries(results)) {
    it(`${name}: covered, no overlap, at most ${MAX_RECTS}`, () => {
      assert.equal(result.max, MAX_RECTS, "the grabber's limit is the host's");
      assert.equal(result.covered, true);
      assert.equal(result.overlap, false);
      assert.ok(result.count >= 1 && result.count <= MAX_RECTS, `${result.count} rectangles`);
    });
  }
  it('merges small neighbours: text lines become a few rectangles, not one per glyph', () => {
    assert.ok((results['text lines']?.count ?? 0) < 20);
  });
});
