/**
 * A build step's output (src/guest/image/build-exec.ts): a template's or a base image's code
 * prints what it likes, so a line is kept only up to its cap, whatever comes before the newline.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { execLogged, MAX_LINE_CHARS } from '../../src/guest/image/build-exec.js';

describe("a build step's output lines", () => {
  it('a line of 64 MiB without a newline is cut at its cap, the lines after it come whole, and the host keeps none of the rest', async () => {
    const lines: string[] = [];
    const heapBefore = process.memoryUsage().heapUsed;
    const began = performance.now();
    await execLogged('sh', ['-c', 'echo first; head -c 67108864 /dev/zero | tr "\\0" x; echo; echo after'], { onLine: (line) => lines.push(line) });
    const ms = performance.now() - began;
    const grown = process.memoryUsage().heapUsed - heapBefore;
    console.log(`a 64 MiB line from a build step: ${ms.toFixed(0)} ms, heap +${(grown / 1048576).toFixed(1)} MiB`);
    assert.equal(lines.length, 3);
    assert.equal(lines[0], 'first');
    assert.equal(lines[1], `${'x'.repeat(MAX_LINE_CHARS)} [cut at ${MAX_LINE_CHARS} characters]`);
    assert.equal(lines[2], 'after');
    assert.ok(grown < 32 * 1048576, `the heap grew ${(grown / 1048576).toFixed(1)} MiB`);
  });

  it('a line of exactly the cap, and lines split across chunks, come as they were', async () => {
    const lines: string[] = [];
    await execLogged('sh', ['-c', `head -c ${MAX_LINE_CHARS} /dev/zero | tr "\\0" y; printf '\\nsplit'; sleep 0.1; printf ' line\\r\\nlast'`], {
      onLine: (line) => lines.push(line),
    });
    assert.deepEqual(lines, ['y'.repeat(MAX_LINE_CHARS), 'split line', 'last']);
  });
});
