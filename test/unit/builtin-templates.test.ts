import assert from 'node:assert/strict';
import { appendFileSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { DESKTOP_RECIPE, DESKTOP_SESSION_PATH } from '../../src/guest/image/desktop-recipe.js';
import { XFCE_RECIPE } from '../../src/guest/image/xfce-recipe.js';
import { GUEST_INIT, SESSION_DISPLAY_MARK, SESSION_VNC_LINK } from '../../src/guest/contract.js';
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
    assert.deepEqual(
      { ...DESKTOP_RECIPE, aptPackages: [], files: [], links: [], vm: {} },
      { ...MINIMAL_RECIPE, aptPackages: [], files: [], links: [], vm: {} },
    );
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

  it('xfce: display :0 started by the session; the shared init, seeing the mark, starts no X server', () => {
    assert.deepEqual(XFCE_RECIPE.display, { number: 0, server: 'session', screen: { width: 1024, height: 768 } });
    assert.equal(MINIMAL_RECIPE.display, undefined);
    assert.equal(DESKTOP_RECIPE.display, undefined);
    // One init for every template: the xfce image carries the mark, the others do not.
    for (const recipe of [MINIMAL_RECIPE, DESKTOP_RECIPE, XFCE_RECIPE]) {
      assert.deepEqual(
        recipe.files.filter((f) => f.target === GUEST_INIT).map((f) => f.source),
        ['sandbox-init'],
      );
    }
    assert.ok(XFCE_RECIPE.files.some((f) => f.target === SESSION_DISPLAY_MARK));
    assert.ok(!MINIMAL_RECIPE.files.some((f) => f.target === SESSION_DISPLAY_MARK));
    assert.ok(!DESKTOP_RECIPE.files.some((f) => f.target === SESSION_DISPLAY_MARK));
    const shared = readFileSync(path.join(guestFilesDir(), 'sandbox-init'), 'utf8');
    assert.ok(shared.includes(`SESSION_DISPLAY_MARK=${SESSION_DISPLAY_MARK}\n`));
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
