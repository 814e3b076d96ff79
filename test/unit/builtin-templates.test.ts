import assert from 'node:assert/strict';
import { appendFileSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { DESKTOP_RECIPE, DESKTOP_SESSION_PATH } from '../../src/guest/image/desktop-recipe.js';
import { XFCE_RECIPE } from '../../src/guest/image/xfce-recipe.js';
import { GUEST_INIT, SESSION_VNC_LINK } from '../../src/guest/contract.js';
import { guestFilesDir, MINIMAL_RECIPE, recipeHash } from '../../src/guest/image/recipe.js';
import { BUILT_IN_TEMPLATE_NAMES, builtInRecipe, DEFAULT_TEMPLATE } from '../../src/guest/image/templates.js';

/**
 * The built-in templates as recipes: names, what `desktop` adds to `minimal`, and which files
 * each image's hash covers. No root, no image: test/desktop.test.ts boots the real thing.
 */
describe('built-in templates', () => {
  it('are minimal, desktop and xfce, desktop by default; an unknown name is refused, listing them', () => {
    assert.deepEqual(BUILT_IN_TEMPLATE_NAMES, ['minimal', 'desktop', 'xfce']);
    assert.equal(DEFAULT_TEMPLATE, 'desktop');
    assert.equal(builtInRecipe('minimal'), MINIMAL_RECIPE);
    assert.equal(builtInRecipe('desktop'), DESKTOP_RECIPE);
    assert.throws(() => builtInRecipe('toString'), /unknown template "toString": the built-in templates are minimal, desktop/);
  });

  it('desktop is minimal plus more: every package and file of minimal, on the same Debian and user', () => {
    assert.deepEqual(DESKTOP_RECIPE.packages, MINIMAL_RECIPE.packages, 'the same debootstrap stage');
    assert.ok((DESKTOP_RECIPE.aptPackages ?? []).includes('firefox-esr'), 'then apt installs the desktop');
    assert.equal(MINIMAL_RECIPE.aptPackages, undefined, 'minimal has no apt stage');
    for (const file of MINIMAL_RECIPE.files)
      assert.ok(
        DESKTOP_RECIPE.files.some((f) => f.target === file.target && f.source === file.source),
        `desktop has ${file.target}`,
      );
    assert.deepEqual({ ...DESKTOP_RECIPE, aptPackages: [], files: [], vm: {} }, { ...MINIMAL_RECIPE, aptPackages: [], files: [], vm: {} });
    assert.ok(
      DESKTOP_RECIPE.files.some((f) => f.target === DESKTOP_SESSION_PATH),
      'desktop ships the session sandbox-init looks for',
    );
    assert.ok(!MINIMAL_RECIPE.files.some((f) => f.target === DESKTOP_SESSION_PATH), 'minimal does not: it gets the xterm');
    // sandbox-init runs the session by this path: the two must agree.
    assert.match(readFileSync(path.join(guestFilesDir(), 'sandbox-init'), 'utf8'), new RegExp(`^TEMPLATE_SESSION=${DESKTOP_SESSION_PATH}$`, 'm'));
  });

  it('every file a recipe lists exists, and each target is written once', () => {
    for (const name of BUILT_IN_TEMPLATE_NAMES) {
      const recipe = builtInRecipe(name);
      for (const file of recipe.files) assert.ok(existsSync(path.join(guestFilesDir(), file.source)), `${name}: ${file.source}`);
      const targets = recipe.files.map((file) => file.target);
      assert.equal(new Set(targets).size, targets.length, `${name}: duplicate targets`);
    }
  });

  it("each template has its own image hash; a template's own files change its hash only", () => {
    assert.notEqual(recipeHash(MINIMAL_RECIPE), recipeHash(DESKTOP_RECIPE));
    assert.equal(recipeHash(), recipeHash(MINIMAL_RECIPE), 'minimal is the default');
    // A copy of src/guest/files with the desktop's panel config changed: desktop's hash
    // follows, minimal's does not (its cached image stays valid).
    const copy = mkdtempSync(path.join(os.tmpdir(), 'sbx-templates-'));
    try {
      cpSync(guestFilesDir(), copy, { recursive: true });
      assert.equal(recipeHash(DESKTOP_RECIPE, copy), recipeHash(DESKTOP_RECIPE));
      appendFileSync(path.join(copy, 'desktop/tint2rc'), '# changed\n');
      assert.notEqual(recipeHash(DESKTOP_RECIPE, copy), recipeHash(DESKTOP_RECIPE));
      assert.equal(recipeHash(MINIMAL_RECIPE, copy), recipeHash(MINIMAL_RECIPE));
      appendFileSync(path.join(copy, 'sandbox-init'), '# changed\n');
      assert.notEqual(recipeHash(MINIMAL_RECIPE, copy), recipeHash(MINIMAL_RECIPE), 'a shared file changes both');
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
    // minimal lists no nested file: the desktop's files are not part of its hash.
    assert.ok(!MINIMAL_RECIPE.files.some((f) => f.source.includes('/')));
  });

  it("xfce: display :0 started by the session; its own init starts no X server and otherwise is the shared init's code", () => {
    assert.deepEqual(XFCE_RECIPE.display, { number: 0, server: 'session', screen: { width: 1024, height: 768 } });
    assert.equal(MINIMAL_RECIPE.display, undefined);
    assert.equal(DESKTOP_RECIPE.display, undefined);
    const init = XFCE_RECIPE.files.filter((f) => f.target === GUEST_INIT);
    assert.deepEqual(
      init.map((f) => f.source),
      ['xfce/sandbox-init'],
    );
    const own = readFileSync(path.join(guestFilesDir(), 'xfce/sandbox-init'), 'utf8');
    const shared = readFileSync(path.join(guestFilesDir(), 'sandbox-init'), 'utf8');
    assert.doesNotMatch(own, /^[^#\n]*\b(Xvfb|openbox|start_desktop)\b/m, 'no code line starts an X server or a window manager');
    // Every function both define is byte for byte the same: a fix to the shared init that
    // misses this copy fails here (readiness, supervision and the pids shutdown stops differ on purpose).
    const functions = (text: string) => new Map([...text.matchAll(/^([a-z_]+)\(\) \{\n[^]*?\n\}$/gm)].map((m) => [m[1] ?? '', m[0]]));
    const [mine, theirs] = [functions(own), functions(shared)];
    const common = [...mine.keys()].filter((name) => theirs.has(name) && !['announce_ready', 'supervise', 'shutdown'].includes(name));
    assert.ok(common.length >= 15, `shared functions: ${common.join(' ')}`);
    for (const name of common) assert.equal(mine.get(name), theirs.get(name), `${name}() differs from the shared init's`);
    // The SDK's programs, and our live view's x11vnc under another name.
    for (const name of ['xvfb', 'xdotool', 'scrot', 'x11-utils', 'x11-xserver-utils', 'x11vnc', 'procps']) assert.ok(XFCE_RECIPE.packages.includes(name), name);
    for (const name of ['xfce4', 'mousepad', 'libgtk-3-bin', 'xdg-utils', 'net-tools', 'dbus-x11']) assert.ok(XFCE_RECIPE.aptPackages?.includes(name), name);
    assert.ok(XFCE_RECIPE.links?.some((l) => l.path === SESSION_VNC_LINK && l.target === '/usr/bin/x11vnc'));
    assert.ok(XFCE_RECIPE.files.some((f) => f.target === '/opt/noVNC/utils/novnc_proxy' && f.mode === 0o755));
  });

  it('the desktop files are well-formed: Firefox policies parse, mimeapps.list has one section of defaults', () => {
    const policies = JSON.parse(readFileSync(path.join(guestFilesDir(), 'desktop/policies.json'), 'utf8')) as { policies: Record<string, unknown> };
    for (const key of ['DisableAppUpdate', 'DisableTelemetry', 'DontCheckDefaultBrowser', 'OverrideFirstRunPage', 'Homepage']) {
      assert.ok(key in policies.policies, `policies.json sets ${key}`);
    }
    const mimeapps = readFileSync(path.join(guestFilesDir(), 'desktop/mimeapps.list'), 'utf8');
    const lines = mimeapps.split('\n').filter((line) => line && !line.startsWith('#'));
    assert.equal(lines[0], '[Default Applications]');
    for (const line of lines.slice(1)) assert.match(line, /^[a-z0-9.+-]+\/[a-zA-Z0-9.+-]+=[A-Za-z0-9.-]+\.desktop$/, line);
  });
});
