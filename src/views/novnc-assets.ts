import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { LIVE_VIEW_SCRIPT } from './live-page-script.js';

/** A file the live page loads, held in memory (noVNC's modules are about 0.5 MiB in all). */
export interface Asset {
  body: Buffer;
  contentType: string;
}

const JS = 'text/javascript; charset=utf-8';

function jsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return jsFiles(full);
    return entry.name.endsWith('.js') ? [full] : [];
  });
}

/**
 * The live page's files by their path under ASSETS_PREFIX: its own script, and noVNC's ES
 * modules from the @novnc/novnc package (no CDN). Only what the page imports is served:
 * core/ (rfb.js and what it imports) and vendor/pako/lib/ (imported by core/ as
 * ../vendor/pako/lib/...), so the relative imports between them resolve as in the package.
 * An allow-list built once: a request names a key of this map or gets a 404, so no path a
 * client sends ever reaches the file system.
 */
export function loadLiveViewAssets(): Map<string, Asset> {
  const require = createRequire(import.meta.url);
  const root = path.dirname(path.dirname(require.resolve('@novnc/novnc'))); // exports ./core/rfb.js
  const assets = new Map<string, Asset>();
  for (const dir of ['core', path.join('vendor', 'pako', 'lib')]) {
    for (const file of jsFiles(path.join(root, dir))) {
      const relative = path.relative(root, file).split(path.sep).join('/');
      assets.set(`novnc/${relative}`, { body: readFileSync(file), contentType: JS });
    }
  }
  assets.set('live-view.js', { body: Buffer.from(LIVE_VIEW_SCRIPT, 'utf8'), contentType: JS });
  return assets;
}
