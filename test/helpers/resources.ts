import { readdir } from 'node:fs/promises';
import { SESSION_ID_PATTERN } from '../../src/network/names.js';
import { run } from '../../src/util/exec.js';

/** What the host holds under a resource prefix: network namespaces, links, key dirs. */
export interface PrefixedResources {
  netns: string[];
  links: string[];
  keyDirs: string[];
}

export async function prefixedResources(prefix: string, stateDir: string): Promise<PrefixedResources> {
  const netns = (await run(['ip', 'netns', 'list'])).stdout
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(prefix));
  const links = (await run(['ip', '-o', 'link', 'show'])).stdout
    .split('\n')
    .map((l) => /^\d+: ([^:@]+)/.exec(l)?.[1] ?? '')
    .filter((n) => n.startsWith(prefix));
  const keyDirs = (await readdir(stateDir, { withFileTypes: true })).filter((e) => e.isDirectory() && SESSION_ID_PATTERN.test(e.name)).map((e) => e.name);
  return { netns: netns.sort(), links: links.sort(), keyDirs: keyDirs.sort() };
}
