import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chooseGuestUids, guestUidsOf, MAX_GUEST_UIDS } from '../../src/runtimes/container/guest-uids.js';
import { userNamespaceHook } from '../../src/runtimes/container/namespace-limits.js';
import { seccompProfile } from '../../src/runtimes/container/seccomp.js';

/**
 * The uids a container's processes may take (inotify is counted per uid: docs/security/containers.md#inotify),
 * and the hook that sets a user namespace's limits where the host cannot step in (a restore, a build step).
 */
describe('unit: guest uids and user namespace limits', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-uids-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('takes root, the desktop user and nobody first, then the uids /etc/passwd names, once each, at most MAX_GUEST_UIDS', () => {
    const passwd = [
      'root:x:0:0::/root:/bin/bash',
      'sshd:x:100:65534::/run/sshd:/usr/sbin/nologin',
      'user:x:1000:1000::/home/user:/bin/bash',
      'bad:x:70000:1::/:/bin/sh',
      'junk',
      'x:x:-1:1::/:/bin/sh',
      'sshd2:x:100:1::/:/bin/sh',
    ].join('\n');
    assert.deepEqual(chooseGuestUids(passwd), [0, 1000, 65534, 100]);
    // A package's daemon before Debian's static users.
    assert.deepEqual(chooseGuestUids('games:x:5:60::/:/bin/sh\nmessagebus:x:102:104::/:/bin/sh\n'), [0, 1000, 65534, 102, 5]);
    const many = Array.from({ length: 100 }, (_, i) => `u${i}:x:${2000 + i}:1::/:/bin/sh`).join('\n');
    const chosen = chooseGuestUids(many);
    assert.equal(chosen.length, MAX_GUEST_UIDS);
    assert.deepEqual(chosen.slice(0, 4), [0, 1000, 65534, 2000]);
  });

  it("reads an image's /etc/passwd, never through a link out of its root", async () => {
    const image = path.join(dir, 'image');
    await mkdir(path.join(image, 'etc'), { recursive: true });
    await writeFile(path.join(image, 'etc', 'passwd'), 'sshd:x:101:65534::/run/sshd:/usr/sbin/nologin\n');
    assert.deepEqual(await guestUidsOf(image), [0, 1000, 65534, 101]);
    const planted = path.join(dir, 'planted');
    await mkdir(path.join(planted, 'etc'), { recursive: true });
    await writeFile(path.join(dir, 'outside'), 'a:x:4000:1::/:/bin/sh\n');
    await symlink(path.join(dir, 'outside'), path.join(planted, 'etc', 'passwd'));
    assert.deepEqual(await guestUidsOf(planted), [0, 1000, 65534], "a link out of the image's root is not followed");
  });

  it('seccomp: set*uid only to those uids (setreuid and setresuid may also leave it unchanged); a build step to any', () => {
    const profile = seccompProfile([0, 1000, 100]);
    const plain = profile.syscalls.find((rule) => rule.args === undefined && rule.names.includes('read'));
    for (const name of ['setuid', 'setuid32', 'setreuid', 'setresuid32']) assert.equal(plain?.names.includes(name), false, `${name} is not allowed plainly`);
    const allowed = (name: string) =>
      profile.syscalls.filter((rule) => rule.names.includes(name)).map((rule) => [rule.args?.[0]?.index, rule.args?.[0]?.value, rule.args?.[0]?.op]);
    assert.deepEqual(allowed('setuid'), [
      [0, 0, 'SCMP_CMP_EQ'],
      [0, 1000, 'SCMP_CMP_EQ'],
      [0, 100, 'SCMP_CMP_EQ'],
    ]);
    assert.deepEqual(
      allowed('setresuid').map(([index, value]) => [index, value]),
      [
        [1, 0],
        [1, 1000],
        [1, 100],
        [1, 0xffffffff],
      ],
    );
    const build = seccompProfile();
    assert.ok(build.syscalls.some((rule) => rule.names.includes('setresuid') && rule.args === undefined));
  });

  it("the hook sets the limits in the namespace of the pid runc's state names, and fails without one", async () => {
    const bin = path.join(dir, 'bin');
    await mkdir(bin);
    await writeFile(path.join(bin, 'nsenter'), '#!/bin/sh\necho "nsenter $*"\n');
    await chmod(path.join(bin, 'nsenter'), 0o755);
    const hook = userNamespaceHook({ inotifyInstances: 128, inotifyWatches: 16384 }, 32);
    assert.equal(hook.path, '/bin/sh');
    const run = (state: string) => spawnSync(hook.path, hook.args.slice(1), { input: state, env: { PATH: `${bin}:/usr/bin:/bin` }, encoding: 'utf8' });
    const ran = run(JSON.stringify({ ociVersion: '1.0.2', id: 'sbx-x', status: 'creating', pid: 4242, bundle: '/b', annotations: {} }));
    assert.equal(ran.status, 0, ran.stderr);
    assert.equal(
      ran.stdout.trim(),
      'nsenter --target=4242 --user -- sysctl -q -w user.max_inotify_instances=4096 user.max_inotify_watches=524288 user.max_user_namespaces=0',
    );
    assert.equal(run(JSON.stringify({ id: 'sbx-x', status: 'creating' })).status, 1);
  });
});
