import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { OrchestratorError } from '../../errors.js';
import { run } from '../../util/exec.js';
import { GUEST_INIT } from '../contract.js';
import type { ContentIndex, GuestImage, ImageManifest } from './image-store.js';
import { pathInRoot } from './path-in-root.js';
import { guestFilesDir } from './recipe.js';

/**
 * The integrity of a guest image, checked before sessions use it. An image's rootfs is
 * shared by every sandbox (and every orchestrator using the same images dir); if it was
 * damaged (a recursive delete that went through a session's view of it, a disk error, a
 * hand edit), every sandbox made from it would fail in ways far from the cause ("stat
 * /sbin/sandbox-init: no such file"). So it is checked once per process, cheaply:
 *
 *  - the content index, written at build (rootfs.index: one record per entry of the
 *    rootfs: path, type, mode, owner, size, mtime, link target; its sha256 is in the
 *    manifest, so the index itself cannot be edited to agree). `find` and `sort` list the
 *    tree again in a child process (~0.1 s for the minimal image, see docs) and only the
 *    digest comes back; on a mismatch the two lists are compared to say what differs;
 *  - the guest's side of our contract, whatever the image's age: the guest init exists and
 *    is executable, and each file we installed (src/guest/files) has exactly our bytes.
 *
 * Nothing is repaired here: the image is shared, so a damaged one is refused with what to do.
 */

/** The file next to the rootfs holding its content index (NUL-terminated records, sorted). */
export const CONTENT_INDEX = 'rootfs.index';

/** A damaged image: creates with it (or a start that needs it) are refused with this message. */
export class DamagedImageError extends OrchestratorError {
  constructor(message: string) {
    super('image_damaged', message);
  }
}

export interface ImageCheck {
  /** Whether a content index was there to check (images built before it have none). */
  indexed: boolean;
  entries: number;
  ms: number;
}

// One record per entry, the path first so that `sort -z` orders by it. A directory's size is
// left out (ext4 keeps the blocks of entries since removed); its mtime says enough.
const DIR_RECORD = '%P\\t%y\\t%m\\t%U\\t%G\\t0\\t%T@\\t\\0';
const OTHER_RECORD = '%P\\t%y\\t%m\\t%U\\t%G\\t%s\\t%T@\\t%l\\0';
// A fixed script; the rootfs comes as $1, never spliced into it.
const LIST = `cd -- "$1" && find . \\( -type d -printf '${DIR_RECORD}' \\) -o -printf '${OTHER_RECORD}' | LC_ALL=C sort -z`;

/** Lists the rootfs into <imageDir>/rootfs.index and returns what the manifest keeps of it (at build). */
export async function writeContentIndex(imageDir: string, rootfs: string): Promise<ContentIndex> {
  const file = join(imageDir, CONTENT_INDEX);
  await run(['sh', '-c', `${LIST} > "$2"`, 'sh', rootfs, file]);
  const bytes = await readFile(file);
  return { file: CONTENT_INDEX, sha256: createHash('sha256').update(bytes).digest('hex'), entries: countRecords(bytes) };
}

/** Checks an image (see above); throws a DamagedImageError saying what differs and `rebuild` (what to run). */
export async function checkImage(image: GuestImage, rebuild: string): Promise<ImageCheck> {
  const started = performance.now();
  const manifest = await readManifest(image.dir);
  const problems = await contractProblems(image.rootfs, manifest);
  let indexed = false;
  let entries = 0;
  if (manifest?.contents) {
    indexed = true;
    entries = manifest.contents.entries;
    const res = await run(['sh', '-c', `${LIST} | sha256sum`, 'sh', image.rootfs]);
    if (res.stdout.split(' ')[0] !== manifest.contents.sha256) problems.push(await describeDifference(image, manifest.contents));
  }
  if (problems.length > 0) {
    throw new DamagedImageError(
      `the guest image ${image.dir} is damaged: ${problems.join('; ')}. It is shared by every sandbox made from it, ` +
        `so it is not used; stop every orchestrator that uses it, then rebuild it: ${rebuild}`,
    );
  }
  return { indexed, entries, ms: Math.round(performance.now() - started) };
}

async function readManifest(dir: string): Promise<ImageManifest | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as ImageManifest;
  } catch {
    return undefined; // a user template keeps its own manifest; the contract is still checked
  }
}

/** The guest init, and the files of ours the recipe installed, byte for byte. */
async function contractProblems(rootfs: string, manifest: ImageManifest | undefined): Promise<string[]> {
  const problems: string[] = [];
  const initPath = await pathInRoot(rootfs, GUEST_INIT);
  const init = initPath ? await stat(initPath).catch(() => undefined) : undefined;
  if (!init?.isFile() || (init.mode & 0o111) === 0) problems.push(`its guest init ${GUEST_INIT} is missing or not executable`);
  for (const file of manifest?.recipe?.files ?? []) {
    if (file.target === GUEST_INIT && problems.length > 0) continue; // said already
    // The recipe's hash covers these files' bytes: an image found by it was built from exactly these.
    // Through the guest's own links (an absolute one starts again at the rootfs, not at the host's root).
    const target = await pathInRoot(rootfs, file.target);
    const [expected, found] = await Promise.all([
      readFile(join(guestFilesDir(), file.source)).catch(() => undefined),
      target ? readFile(target).catch(() => undefined) : undefined,
    ]);
    if (expected && !found?.equals(expected)) problems.push(`${file.target} is ${found ? 'not the file it was built with' : 'missing'}`);
  }
  return problems;
}

/** Which entries are missing, changed or added, against the index written at build. */
async function describeDifference(image: GuestImage, index: ContentIndex): Promise<string> {
  const stored = await readFile(join(image.dir, index.file)).catch(() => undefined);
  if (!stored) return `its content index ${index.file} is missing`;
  if (createHash('sha256').update(stored).digest('hex') !== index.sha256) return `its content index ${index.file} does not match the manifest`;
  const now = recordsByPath(Buffer.from((await run(['sh', '-c', LIST, 'sh', image.rootfs])).stdout, 'utf8'));
  const before = recordsByPath(stored);
  const missing: string[] = [];
  const changed: string[] = [];
  for (const [path, record] of before) {
    const current = now.get(path);
    if (current === undefined) missing.push(path);
    else if (current !== record) changed.push(path);
  }
  const added = [...now.keys()].filter((path) => !before.has(path));
  const some = (paths: string[]) =>
    paths
      .slice(0, 3)
      .map((p) => `/${p}`)
      .join(', ') + (paths.length > 3 ? ', ...' : '');
  const parts = [
    missing.length ? `${missing.length} of its ${before.size} files and directories are missing (${some(missing)})` : '',
    changed.length ? `${changed.length} changed (${some(changed)})` : '',
    added.length ? `${added.length} added (${some(added)})` : '',
  ].filter(Boolean);
  return parts.join(', ') || 'its listing differs from the one written at build';
}

function recordsByPath(bytes: Buffer): Map<string, string> {
  const records = new Map<string, string>();
  for (const record of bytes.toString('utf8').split('\0')) {
    if (!record) continue;
    const tab = record.indexOf('\t');
    records.set(record.slice(0, tab), record.slice(tab + 1));
  }
  return records;
}

function countRecords(bytes: Buffer): number {
  let n = 0;
  for (let i = bytes.indexOf(0); i !== -1; i = bytes.indexOf(0, i + 1)) n++;
  return n;
}
