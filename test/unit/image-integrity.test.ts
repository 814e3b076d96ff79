import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readFile, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GUEST_INIT } from '../../src/guest/contract.js';
import { checkImage, DamagedImageError, writeContentIndex } from '../../src/guest/image/image-integrity.js';
import { imageAt, type GuestImage } from '../../src/guest/image/image-store.js';
import { pathInRoot } from '../../src/guest/image/path-in-root.js';
import { removeTreeOnOneMount } from '../../src/host/remove-tree.js';
import { httpStatusOf } from '../../src/api/errors.js';

/** A small image as the builder leaves one: a rootfs with a guest init, a manifest with the content index. */
async function makeImage(dir: string, indexed: boolean): Promise<GuestImage> {
  const image = imageAt(dir, 'testhash', { rootfs: 'rootfs', ext4: 'rootfs.ext4', kernel: 'vmlinuz', initrd: 'initrd.img' });
  await mkdir(path.join(image.rootfs, 'sbin'), { recursive: true });
  await mkdir(path.join(image.rootfs, 'etc', 'ssh'), { recursive: true });
  await mkdir(path.join(image.rootfs, 'usr', 'bin'), { recursive: true });
  await writeFile(path.join(image.rootfs, GUEST_INIT), '#!/bin/sh\nexec sleep infinity\n');
  await chmod(path.join(image.rootfs, GUEST_INIT), 0o755);
  await writeFile(path.join(image.rootfs, 'etc', 'hostname'), 'sbx\n');
  await writeFile(path.join(image.rootfs, 'etc', 'ssh', 'sshd_config'), 'PermitRootLogin forced-commands-only\n');
  for (let i = 0; i < 20; i++) await writeFile(path.join(image.rootfs, 'usr', 'bin', `tool${i}`), `tool ${i}\n`);
  await symlink('../usr/bin/tool0', path.join(image.rootfs, 'sbin', 'tool'));
  const manifest: Record<string, unknown> = { hash: 'testhash', recipe: { files: [] } };
  if (indexed) manifest.contents = await writeContentIndex(dir, image.rootfs);
  await writeFile(path.join(dir, 'manifest.json'), JSON.stringify(manifest));
  return image;
}

const REBUILD = 'sbx image build --template minimal --force';

describe('guest image integrity', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'sbx-image-integrity-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('passes an intact image, with the count of entries its index lists', async () => {
    const image = await makeImage(path.join(root, 'intact'), true);
    const check = await checkImage(image, REBUILD);
    assert.equal(check.indexed, true);
    // the rootfs itself, sbin, etc, etc/ssh, usr, usr/bin, 20 tools, the init, hostname, sshd_config, the link
    assert.equal(check.entries, 30);
  });

  it('refuses an image with files missing, changed or added, naming them and saying what to run', async () => {
    const image = await makeImage(path.join(root, 'damaged'), true);
    await unlink(path.join(image.rootfs, 'usr', 'bin', 'tool3'));
    await unlink(path.join(image.rootfs, 'usr', 'bin', 'tool4'));
    await writeFile(path.join(image.rootfs, 'etc', 'hostname'), 'evil!\n');
    await writeFile(path.join(image.rootfs, 'etc', 'planted'), 'x');
    const err = await checkImage(image, REBUILD).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof DamagedImageError, String(err));
    assert.equal(httpStatusOf(err.code), 503);
    assert.equal(err.code, 'image_damaged');
    assert.match(err.message, new RegExp(`the guest image ${image.dir} is damaged`));
    assert.match(err.message, /2 of its 30 files and directories are missing \(\/usr\/bin\/tool3, \/usr\/bin\/tool4\)/);
    // hostname's size changed; etc/ and usr/bin/ changed their mtime with the entries added and removed.
    assert.match(err.message, /changed \([^)]*\/etc\/hostname/);
    assert.match(err.message, /1 added \(\/etc\/planted\)/);
    assert.match(err.message, /stop every orchestrator that uses it, then rebuild it: sbx image build --template minimal --force/);
  });

  it('notices a file rewritten with the same size (its mtime), and an index edited to agree', async () => {
    const image = await makeImage(path.join(root, 'same-size'), true);
    await new Promise((resolve) => setTimeout(resolve, 1100)); // a later whole second
    await writeFile(path.join(image.rootfs, 'etc', 'hostname'), 'xyz\n');
    await assert.rejects(checkImage(image, REBUILD), /1 changed \(\/etc\/hostname\)/);
    const index = path.join(image.dir, 'rootfs.index');
    await writeFile(index, Buffer.concat([await readFile(index), Buffer.from('x\0')]));
    await assert.rejects(checkImage(image, REBUILD), /its content index rootfs\.index does not match the manifest/);
  });

  it('refuses an image whose guest init is gone, with or without an index (the damage of issue 21)', async () => {
    for (const indexed of [true, false]) {
      const image = await makeImage(path.join(root, `no-init-${indexed}`), indexed);
      await unlink(path.join(image.rootfs, GUEST_INIT));
      await assert.rejects(checkImage(image, REBUILD), new RegExp(`its guest init ${GUEST_INIT} is missing or not executable`));
    }
  });

  it('checks an image built before the index by its guest files only, and says it has no index', async () => {
    const image = await makeImage(path.join(root, 'old'), false);
    await unlink(path.join(image.rootfs, 'usr', 'bin', 'tool5'));
    const check = await checkImage(image, REBUILD);
    assert.equal(check.indexed, false);
  });
});

describe('a tree removed on its own filesystem', () => {
  it('removes the tree and nothing a symbolic link in it points at', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'sbx-remove-tree-'));
    try {
      const outside = path.join(root, 'outside');
      await mkdir(outside);
      await writeFile(path.join(outside, 'keep'), 'keep');
      const tree = path.join(root, 'tree');
      await mkdir(path.join(tree, 'a', 'b'), { recursive: true });
      await writeFile(path.join(tree, 'a', 'b', 'f'), 'f');
      await symlink(outside, path.join(tree, 'a', 'link'));
      await removeTreeOnOneMount(tree);
      await assert.rejects(readFile(path.join(tree, 'a', 'b', 'f')), /ENOENT/);
      assert.equal(await readFile(path.join(outside, 'keep'), 'utf8'), 'keep');
      await removeTreeOnOneMount(tree); // gone already: nothing to do
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe('a guest path in a rootfs, through the guest links', () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'sbx-path-in-root-'));
    await mkdir(path.join(root, 'etc', 'libreoffice', 'registry'), { recursive: true });
    await writeFile(path.join(root, 'etc', 'libreoffice', 'registry', 'ours.xcd'), 'ours');
    await mkdir(path.join(root, 'usr', 'lib', 'libreoffice', 'share'), { recursive: true });
    // As Debian's libreoffice ships it: an absolute link, meaningful in the guest only.
    await symlink('/etc/libreoffice/registry', path.join(root, 'usr', 'lib', 'libreoffice', 'share', 'registry'));
    await symlink('../../../../../../../etc', path.join(root, 'usr', 'lib', 'climb'));
    await symlink('loop-b', path.join(root, 'loop-a'));
    await symlink('loop-a', path.join(root, 'loop-b'));
  });
  after(() => rm(root, { recursive: true, force: true }));

  it("follows an absolute link from the rootfs, not from the host's root (Debian's desktop image was refused as damaged)", async () => {
    assert.equal(await pathInRoot(root, '/usr/lib/libreoffice/share/registry/ours.xcd'), path.join(root, 'etc', 'libreoffice', 'registry', 'ours.xcd'));
  });
  it('never climbs above the rootfs, and gives up on a loop or a missing part', async () => {
    assert.equal(await pathInRoot(root, '/usr/lib/climb/libreoffice/registry/ours.xcd'), path.join(root, 'etc', 'libreoffice', 'registry', 'ours.xcd'));
    assert.equal(await pathInRoot(root, '/../../etc/libreoffice/registry/ours.xcd'), path.join(root, 'etc', 'libreoffice', 'registry', 'ours.xcd'));
    assert.equal(await pathInRoot(root, '/loop-a/x'), undefined);
    assert.equal(await pathInRoot(root, '/etc/missing/x'), undefined);
  });
});
