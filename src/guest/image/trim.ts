// What the build removes from a finished rootfs (caches, docs, translations), and the
// settings that keep later package installs in the guest as small.

type InRoot = (argv: string[], options?: { stdin?: Buffer }) => Promise<void>;

/** Removes apt caches, docs, man pages and translations; refreshes the system font cache. */
export async function trimRootfs(inRoot: InRoot): Promise<void> {
  const deleteAll = (dir: string, ...filters: string[]) => inRoot(['find', dir, '-mindepth', '1', ...filters, '-delete']);
  await deleteAll('/var/cache/apt');
  await deleteAll('/var/lib/apt/lists', '-type', 'f');
  await deleteAll('/var/log', '-type', 'f');
  // Keep the copyright files: they are tiny and the licences ask for them.
  await deleteAll('/usr/share/doc', '!', '-type', 'd', '!', '-name', 'copyright');
  await deleteAll('/usr/share/doc', '-type', 'd', '-empty');
  await deleteAll('/usr/share/man');
  await deleteAll('/usr/share/info');
  // Translations; the C and C.UTF-8 locales live in /usr/lib/locale and stay.
  await deleteAll('/usr/share/locale', '!', '-name', 'locale.alias');
  // Some font packages leave the system font cache stale; then every desktop program
  // rebuilds it in the user's home at boot, and the first seconds of the desktop are black.
  await inRoot(['fc-cache', '--system-only']);
  // Packages added later by derived images (apt in the guest) stay small too.
  await inRoot(['tee', '/etc/dpkg/dpkg.cfg.d/01-sandbox-nodoc'], {
    stdin: Buffer.from(
      [
        'path-exclude /usr/share/doc/*',
        'path-include /usr/share/doc/*/copyright',
        'path-exclude /usr/share/man/*',
        'path-exclude /usr/share/info/*',
        'path-exclude /usr/share/locale/*',
        'path-include /usr/share/locale/locale.alias',
        '',
      ].join('\n'),
    ),
  });
}
