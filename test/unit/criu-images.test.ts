import assert from 'node:assert/strict';
import { link, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  decodeUserns,
  decodeUtsns,
  encodeUserns,
  encodeUtsns,
  readEntry,
  rewriteForFork,
  USERNS_MAGIC,
  UTSNS_MAGIC,
  writeEntry,
} from '../../src/runtimes/container/criu-images.js';

/**
 * The two criu images a container fork rewrites (src/runtimes/container/criu-images.ts), in
 * criu's own format (criu/image.c: common magic, image magic, size-prefixed protobuf entries;
 * images/userns.proto, images/utsns.proto): the source's host id range moved to the fork's,
 * the hostname set, each written as a new file (the snapshot's, linked, untouched), and an
 * image that maps ids outside the source's range refused.
 */
const SOURCE = { first: 265_536, size: 65_536 };
const FORK = { first: 462_144, size: 65_536 };

describe('criu images of a fork', () => {
  let dir: string;
  let snapshot: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-criu-images-'));
    snapshot = await mkdtemp(path.join(os.tmpdir(), 'sbx-criu-snapshot-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
    await rm(snapshot, { recursive: true, force: true });
  });

  async function images(uidMap = [{ first: 0, lowerFirst: SOURCE.first, count: SOURCE.size }]): Promise<void> {
    await rm(dir, { recursive: true, force: true });
    await rm(snapshot, { recursive: true, force: true });
    for (const d of [dir, snapshot]) await mkdir(d);
    const gidMap = [
      { first: 0, lowerFirst: SOURCE.first, count: 1000 },
      { first: 1000, lowerFirst: SOURCE.first + 1000, count: 64_536 },
    ];
    await writeFile(path.join(snapshot, 'userns-11.img'), writeEntry(USERNS_MAGIC, encodeUserns({ uidMap, gidMap })));
    await writeFile(path.join(snapshot, 'utsns-12.img'), writeEntry(UTSNS_MAGIC, encodeUtsns({ nodename: 'sbx-source', domainname: '(none)' })));
    for (const name of ['userns-11.img', 'utsns-12.img']) await link(path.join(snapshot, name), path.join(dir, name));
  }

  it("moves every extent into the fork's range and names the fork, in new files", async () => {
    await images();
    const before = await readFile(path.join(snapshot, 'userns-11.img'));
    await rewriteForFork(dir, SOURCE, FORK, 'sbx-fork');
    const userns = decodeUserns(readEntry(await readFile(path.join(dir, 'userns-11.img')), USERNS_MAGIC));
    assert.deepEqual(userns.uidMap, [{ first: 0, lowerFirst: FORK.first, count: FORK.size }]);
    assert.deepEqual(userns.gidMap, [
      { first: 0, lowerFirst: FORK.first, count: 1000 },
      { first: 1000, lowerFirst: FORK.first + 1000, count: 64_536 },
    ]);
    assert.deepEqual(decodeUtsns(readEntry(await readFile(path.join(dir, 'utsns-12.img')), UTSNS_MAGIC)), { nodename: 'sbx-fork', domainname: '(none)' });
    assert.deepEqual(await readFile(path.join(snapshot, 'userns-11.img')), before, "the snapshot's image, linked, is as it was");
    const sourceUts = decodeUtsns(readEntry(await readFile(path.join(snapshot, 'utsns-12.img')), UTSNS_MAGIC));
    assert.equal(sourceUts.nodename, 'sbx-source');
  });

  it("refuses an image that maps host ids outside the source's range, or is not criu's", async () => {
    await images([{ first: 0, lowerFirst: 0, count: 1 }]);
    await assert.rejects(rewriteForFork(dir, SOURCE, FORK, 'sbx-fork'), /outside its source's range/);
    assert.throws(() => readEntry(Buffer.from('not an image at all'), USERNS_MAGIC), /not a criu image/);
    const cut = writeEntry(USERNS_MAGIC, encodeUserns({ uidMap: [], gidMap: [] }));
    assert.throws(() => readEntry(Buffer.concat([cut, Buffer.from([1, 2])]), USERNS_MAGIC), /more than one entry/);
  });
});
