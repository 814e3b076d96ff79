import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { GUEST_INIT } from '../../src/guest/contract.js';
import { GUEST_ROOT_DEVICE } from '../../src/guest/kernel-cmdline.js';
import { initScript } from '../../src/guest/image/initrd-init.js';
import { run } from '../../src/util/exec.js';

/**
 * Every shell script of the project passes shellcheck: the guest's init, its forced-command
 * and login shells, the generated initrd /init, the setup and test scripts, the Firecracker
 * stand-ins. A guest script's mistake (an unquoted path, a lost exit status) shows only in a
 * booted guest, if at all; shellcheck finds most of them in a second. No root, no sandbox.
 */
const ROOT = path.resolve(import.meta.dirname, '../..');

/** Files in `dir` whose first line names sh or bash. */
async function shellScriptsIn(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = path.join(dir, entry.name);
    const firstLine = (await readFile(file, 'utf8')).split('\n', 1)[0] ?? '';
    if (/^#!\s*(\/bin\/(ba)?sh|\/usr\/bin\/env (ba)?sh)\b/.test(firstLine)) found.push(file);
  }
  return found;
}

interface Finding {
  file: string;
  line: number;
  level: string;
  code: number;
  message: string;
}

describe('shellcheck', () => {
  let scratch: string | undefined;
  after(async () => {
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  it('finds nothing in the guest scripts, the generated initrd /init, and scripts/', async () => {
    const version = await run(['shellcheck', '--version'], { allowFailure: true }).catch(() => undefined);
    assert.equal(version?.exitCode, 0, 'shellcheck is not installed: run scripts/setup.sh (Debian package shellcheck)');

    scratch = await mkdtemp(path.join(os.tmpdir(), 'sbx-shellcheck-'));
    // The initrd's /init as the image build writes it (it runs under busybox sh).
    const initrdInit = path.join(scratch, 'initrd-init');
    await writeFile(
      initrdInit,
      initScript({ modules: ['virtio_ring', 'virtio', 'virtio_blk'], defaultRoot: GUEST_ROOT_DEVICE, defaultInit: GUEST_INIT, rootWaitSeconds: 10 }),
    );
    const guestScripts = [
      ...(await shellScriptsIn(path.join(ROOT, 'src/guest/files'))),
      // The templates' own files (e.g. the desktop template's session).
      ...(await shellScriptsIn(path.join(ROOT, 'src/guest/files/desktop'))),
    ];
    const files = [
      ...guestScripts,
      initrdInit,
      ...(await shellScriptsIn(path.join(ROOT, 'scripts'))),
      ...(await shellScriptsIn(path.join(ROOT, 'test/helpers/firecracker/bin'))),
    ];
    // The scripts the guest runs by name must be among them (a renamed one must not drop out).
    for (const name of ['sandbox-init', 'sbx-rekey', 'sbx-user-shell', 'sbx-desktop-session']) {
      assert.ok(
        guestScripts.some((f) => path.basename(f) === name),
        `${name} is a shell script in src/guest/files`,
      );
    }

    const res = await run(['shellcheck', '--format=json1', '--severity=style', ...files], { allowFailure: true });
    const findings = ((JSON.parse(res.stdout) as { comments: Finding[] }).comments ?? []).map(
      (c) => `${path.relative(ROOT, c.file)}:${c.line}: SC${c.code} (${c.level}) ${c.message}`,
    );
    assert.deepEqual(findings, [], `shellcheck over ${files.length} scripts`);
    assert.equal(res.exitCode, 0, res.stderr);
  });
});
