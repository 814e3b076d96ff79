/**
 * The built-in template `xfce`: the desktop E2B Desktop's SDK drives (its own template is
 * XFCE on display :0). Debian's XFCE with an editor and a terminal, and every program the
 * SDK runs in the guest: Xvfb, xdotool, scrot, xdpyinfo, xrandr, gtk-launch, xdg-open,
 * netstat, pgrep/pkill, x11vnc, and noVNC's novnc_proxy (ours: see files/xfce/novnc_proxy).
 *
 * Its X server is not ours: the SDK's Sandbox.create starts `Xvfb :0 ...` and `startxfce4`
 * itself, as the desktop user. So the template names the display (:0) and says so
 * (`display.server: 'session'`); the shared init, seeing SESSION_DISPLAY_MARK, starts no X
 * server, the session is ready once SSH is, and capture, input and the live view attach to :0 once it
 * answers (until then an action is a 409 display_not_ready). The E2B surface maps E2B's
 * template name `desktop` to this one (docs/e2b.md).
 */
import { DESKTOP_RECIPE } from './desktop-recipe.js';
import { SESSION_DISPLAY_MARK, SESSION_VNC_LINK } from '../contract.js';
import { MINIMAL_RECIPE, type GuestRecipe, type RecipeFile } from './recipe.js';

/** The display the SDK starts (E2B Desktop's `display` option defaults to ":0"). */
export const XFCE_DISPLAY = 0;

// minimal's packages without its own desktop (openbox, the lone xterm and its bitmap fonts).
const BASE_PACKAGES = MINIMAL_RECIPE.packages.filter((name) => !['openbox', 'xterm', 'xfonts-base'].includes(name));

const XFCE_PACKAGES: readonly string[] = [
  // Debian's XFCE (without Recommends: no xorg server, no screensaver, no power manager).
  'xfce4',
  'xfce4-terminal',
  'mousepad',
  'adwaita-icon-theme',
  'librsvg2-common', // SVG icons (panel, GTK)
  // startxfce4 starts the session bus with dbus-launch (dbus-x11: no systemd or PAM needed).
  'dbus-x11',
  // What the SDK runs: gtk-launch (launch), xdg-open (open), netstat (stream.start waits with it).
  'libgtk-3-bin',
  'xdg-utils',
  'file', // xdg-mime tells a file's type with it outside a full desktop environment
  'net-tools',
];

const XFCE_FILES: readonly RecipeFile[] = [
  ...MINIMAL_RECIPE.files,
  // The shared init starts no display where this mark is: this template's display is the session's own.
  { source: 'xfce/session-display', target: SESSION_DISPLAY_MARK, mode: 0o644 },
  { source: 'xfce/novnc_proxy', target: '/opt/noVNC/utils/novnc_proxy', mode: 0o755 },
  ...DESKTOP_RECIPE.files.filter((file) => file.source === 'desktop/mousepad.gschema.override'),
];

export const XFCE_RECIPE: GuestRecipe = {
  ...MINIMAL_RECIPE,
  packages: BASE_PACKAGES,
  aptPackages: XFCE_PACKAGES,
  files: XFCE_FILES,
  links: [
    // Our live view's x11vnc under another name (see vncServerFor in contract.ts).
    { path: SESSION_VNC_LINK, target: '/usr/bin/x11vnc' },
    // XFCE's panel asks on its first start which layout to use (a dialog over an empty screen)
    // unless xfconf has a panel channel: Debian's default layout is made the system-wide one.
    { path: '/etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml', target: '/etc/xdg/xfce4/panel/default.xml' },
  ],
  // The SDK's Xvfb is 1024x768 unless its `resolution` option says otherwise.
  display: { number: XFCE_DISPLAY, server: 'session', screen: { width: 1024, height: 768 } },
};
