/**
 * The built-in template `desktop`, the default for new sessions: minimal's recipe plus what a
 * person (or a model) needs to work: a panel with launchers, a browser, an office suite, a
 * file manager, an editor, viewers, and fonts for the scripts a model may type. Its own files
 * live in src/guest/files/desktop/ (see docs/templates.md for what the desktop looks like).
 */
import { MINIMAL_RECIPE, type GuestRecipe, type RecipeFile } from './recipe.js';

/** The program sandbox-init runs as the desktop user in place of minimal's lone xterm. */
export const DESKTOP_SESSION_PATH = '/usr/local/libexec/sbx-desktop-session';

const DESKTOP_PACKAGES: readonly string[] = [
  // The panel (taskbar, launchers, clock) and the background.
  'tint2',
  'hsetroot',
  'adwaita-icon-theme',
  'gnome-themes-extra', // Adwaita for the GTK 2 programs (PCManFM, GPicView), see gtkrc-2.0
  'librsvg2-common', // SVG icons (launchers, GTK)
  // The applications.
  'firefox-esr',
  // Debian's Chromium, for scripts that drive the desktop's browser over CDP
  // (POST /v1/sessions/:id/browser starts it with remote debugging on the guest's loopback).
  'chromium',
  'lxterminal',
  'pcmanfm',
  'mousepad', // saves UTF-8 as typed
  'vim-tiny', // an editor in a terminal (a PTY process of the API, the xterm)
  'mupdf',
  'gpicview',
  // Writer and Calc, without Recommends (see docs/templates.md for the size they add).
  'libreoffice-writer',
  'libreoffice-calc',
  'libreoffice-gtk3', // the GTK look, instead of LibreOffice's bare X11 widgets
  // Fonts: DejaVu (from minimal) covers Latin, Greek and Cyrillic; these add CJK, emoji,
  // and metric-compatible replacements for the fonts office documents name.
  'fonts-noto-cjk',
  'fonts-noto-color-emoji',
  'fonts-liberation2',
  // xdg-open, and `file`, which xdg-mime needs to tell a file's type outside a full DE.
  'xdg-utils',
  'file',
  // The session bus GTK's settings backend (dconf) asks for: dbus-x11 provides it without
  // systemd (apt would otherwise pick dbus-user-session, which wants systemd and PAM).
  'dbus-x11',
];

const DESKTOP_FILES: readonly RecipeFile[] = [
  { source: 'desktop/sbx-desktop-session', target: DESKTOP_SESSION_PATH, mode: 0o755 },
  { source: 'desktop/terminal.desktop', target: '/usr/local/share/applications/sbx-terminal.desktop', mode: 0o644 },
  { source: 'desktop/tint2rc', target: '/etc/xdg/tint2/sandbox.tint2rc', mode: 0o644 },
  { source: 'desktop/gtkrc-2.0', target: '/etc/gtk-2.0/gtkrc', mode: 0o644 },
  { source: 'desktop/policies.json', target: '/usr/lib/firefox-esr/distribution/policies.json', mode: 0o644 },
  { source: 'desktop/firefox-prefs.js', target: '/usr/lib/firefox-esr/defaults/pref/sandbox-desktop.js', mode: 0o644 },
  { source: 'desktop/libreoffice.xcd', target: '/usr/lib/libreoffice/share/registry/sandbox-desktop.xcd', mode: 0o644 },
  // Compiled by the build (builder.ts runs glib-compile-schemas when a recipe adds one).
  { source: 'desktop/mousepad.gschema.override', target: '/usr/share/glib-2.0/schemas/90_sandbox-desktop.gschema.override', mode: 0o644 },
  // xdg-mime reads the defaults from /etc/xdg (XDG_CONFIG_DIRS) and, for older tools, from
  // the applications folder: the same file in both.
  { source: 'desktop/mimeapps.list', target: '/etc/xdg/mimeapps.list', mode: 0o644 },
  { source: 'desktop/mimeapps.list', target: '/usr/share/applications/mimeapps.list', mode: 0o644 },
];

export const DESKTOP_RECIPE: GuestRecipe = {
  ...MINIMAL_RECIPE,
  aptPackages: DESKTOP_PACKAGES,
  files: [...MINIMAL_RECIPE.files, ...DESKTOP_FILES],
  // vim-tiny installs vim.tiny (and vi): `vim` too, as people type it.
  links: [{ path: '/usr/local/bin/vim', target: '/usr/bin/vim.tiny' }],
  // Firefox and LibreOffice need room for profiles and downloads in the VMs' root disk.
  vm: { ...MINIMAL_RECIPE.vm, rootHeadroomMiB: 2048 },
};
