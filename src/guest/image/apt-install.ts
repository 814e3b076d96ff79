import { copyFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';

// The second package stage of a build: a template's packages installed with apt inside the
// fresh rootfs, after debootstrap. Why not debootstrap's --include: it resolves dependencies
// naively (seen here: it pulled both libreoffice-core and libreoffice-core-nogui, which
// conflict, and left dconf's "default-dbus-session-bus | dbus-session-bus" unresolved); apt
// resolves alternatives and conflicts as any Debian system does. Everything runs through
// chroot, so apt and the packages' maintainer scripts act on the rootfs, never on the host.

export interface AptInstallSteps {
  /** Runs argv inside the rootfs (chroot), its output lines to the build log. */
  inRoot(argv: string[], options?: { stdin?: Buffer }): Promise<void>;
  /** Progress for the user: apt's own "Get:" and "Setting up" lines are too many. */
  report(line: string): void;
}

/** Debian's way to tell maintainer scripts not to start services (there is no init in a chroot). */
const POLICY_RC_D = '/usr/sbin/policy-rc.d';

const APT_ARGS = ['-y', '-q', '--no-install-recommends', '-o', 'Dpkg::Options::=--force-confdef', '-o', 'Dpkg::Options::=--force-confold'];

/**
 * Installs `packages` (without Recommends) into `rootfs`. Downloaded packages are shared with
 * debootstrap's cache (`cacheDir`, flat *.deb files) in both directions, so that a rebuild
 * downloads nothing it already has.
 */
export async function installWithApt(rootfs: string, packages: readonly string[], cacheDir: string, steps: AptInstallSteps): Promise<void> {
  const archives = join(rootfs, 'var', 'cache', 'apt', 'archives');
  const cached = await copyDebs(cacheDir, archives);
  steps.report(`apt: ${packages.length} packages (and their dependencies); ${cached} packages already downloaded`);
  await steps.inRoot(['tee', POLICY_RC_D], { stdin: Buffer.from('#!/bin/sh\nexit 101\n') });
  await steps.inRoot(['chmod', '0755', POLICY_RC_D]);
  try {
    await steps.inRoot(['apt-get', '-q', 'update']);
    await steps.inRoot(['apt-get', 'install', ...APT_ARGS, '--', ...packages]);
  } finally {
    await steps.inRoot(['rm', '-f', POLICY_RC_D]);
    // Also after a failure: what was downloaded is kept for the next attempt.
    await copyDebs(archives, cacheDir).catch(() => 0);
  }
}

/** Copies the *.deb files of `from` that `to` lacks; returns how many `to` now shares with `from`. */
async function copyDebs(from: string, to: string): Promise<number> {
  const present = new Set(await readdir(to).catch(() => [] as string[]));
  const debs = (await readdir(from).catch(() => [] as string[])).filter((name) => name.endsWith('.deb'));
  for (const name of debs) {
    if (!present.has(name)) await copyFile(join(from, name), join(to, name));
  }
  return debs.length;
}
