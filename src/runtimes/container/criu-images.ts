import { readdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import type { IdRange } from './idmapped-mount.js';

/**
 * The two of criu's images a fork's restore reads otherwise than its source's (fork.ts): its
 * user namespace's id maps (userns-<n>.img), which name host ids, the source's range, and must
 * name the fork's; and its UTS namespace (utsns-<n>.img), whose hostname is the fork's own.
 * Every other id in the images is one of the guest's (criu stores them as its user namespace
 * sees them), so nothing else changes.
 *
 * An image file (criu/image.c): criu's common magic, the image's own, then each entry as a
 * 32-bit little-endian size and a protobuf message (images/userns.proto, images/utsns.proto);
 * these two hold one entry each.
 */

const COMMON_MAGIC = 0x54564319;
export const USERNS_MAGIC = 0x55474906;
export const UTSNS_MAGIC = 0x54473203;

/** userns.proto's uid_gid_extent: guest ids first..first+count-1 are host ids lower_first... */
export interface IdExtent {
  first: number;
  lowerFirst: number;
  count: number;
}

export interface UsernsEntry {
  uidMap: IdExtent[];
  gidMap: IdExtent[];
}

/**
 * Rewrites the fork's copy of the images (`dir`, its own files: each rewritten one replaced by
 * a new file, never written through a link it shares with the snapshot): every id extent moved
 * from the source's host range to the fork's, and the hostname set. An extent outside the
 * source's range, or an image of another form, is refused: nothing is restored from it.
 */
export async function rewriteForFork(dir: string, from: IdRange, to: IdRange, hostname: string): Promise<void> {
  const names = await readdir(dir);
  const userns = names.filter((n) => /^userns-\d+\.img$/.test(n));
  const utsns = names.filter((n) => /^utsns-\d+\.img$/.test(n));
  if (userns.length !== 1 || utsns.length !== 1)
    throw new Error(`the snapshot's images have ${userns.length} user and ${utsns.length} UTS namespaces, not one each`);
  const move = (e: IdExtent): IdExtent => {
    if (e.lowerFirst < from.first || e.lowerFirst + e.count > from.first + from.size) {
      throw new Error(`the snapshot's user namespace maps host ids ${e.lowerFirst}+${e.count}, outside its source's range ${from.first}+${from.size}`);
    }
    return { ...e, lowerFirst: e.lowerFirst - from.first + to.first };
  };
  for (const name of userns) {
    const file = path.join(dir, name);
    const entry = decodeUserns(readEntry(await readFile(file), USERNS_MAGIC));
    await replace(file, writeEntry(USERNS_MAGIC, encodeUserns({ uidMap: entry.uidMap.map(move), gidMap: entry.gidMap.map(move) })));
  }
  for (const name of utsns) {
    const file = path.join(dir, name);
    const entry = decodeUtsns(readEntry(await readFile(file), UTSNS_MAGIC));
    await replace(file, writeEntry(UTSNS_MAGIC, encodeUtsns({ ...entry, nodename: hostname })));
  }
}

/** The one entry of an image file, checked to be of `magic`'s kind. */
export function readEntry(file: Buffer, magic: number): Uint8Array {
  if (file.length < 12 || file.readUInt32LE(0) !== COMMON_MAGIC || file.readUInt32LE(4) !== magic) {
    throw new Error(`not a criu image of kind 0x${magic.toString(16)}`);
  }
  const size = file.readUInt32LE(8);
  if (12 + size !== file.length) throw new Error('a criu image of more than one entry, or cut short');
  return file.subarray(12);
}

export function writeEntry(magic: number, payload: Uint8Array): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt32LE(COMMON_MAGIC, 0);
  head.writeUInt32LE(magic, 4);
  head.writeUInt32LE(payload.length, 8);
  return Buffer.concat([head, payload]);
}

export function decodeUserns(bytes: Uint8Array): UsernsEntry {
  const entry: UsernsEntry = { uidMap: [], gidMap: [] };
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, type] = reader.tag();
    if ((field === 1 || field === 2) && type === WireType.LengthDelimited) (field === 1 ? entry.uidMap : entry.gidMap).push(decodeExtent(reader.bytes()));
    else reader.skip(type, field);
  }
  return entry;
}

function decodeExtent(bytes: Uint8Array): IdExtent {
  const extent: Partial<IdExtent> = {};
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, type] = reader.tag();
    if (type !== WireType.Varint) reader.skip(type, field);
    else if (field === 1) extent.first = reader.uint32();
    else if (field === 2) extent.lowerFirst = reader.uint32();
    else if (field === 3) extent.count = reader.uint32();
    else reader.skip(type, field);
  }
  const { first, lowerFirst, count } = extent;
  if (first === undefined || lowerFirst === undefined || count === undefined) throw new Error('an id extent of the user namespace image lacks a field');
  return { first, lowerFirst, count };
}

export function encodeUserns(entry: UsernsEntry): Uint8Array {
  const writer = new BinaryWriter();
  for (const [field, map] of [
    [1, entry.uidMap],
    [2, entry.gidMap],
  ] as const) {
    for (const e of map) {
      writer.tag(field, WireType.LengthDelimited).fork();
      writer.tag(1, WireType.Varint).uint32(e.first).tag(2, WireType.Varint).uint32(e.lowerFirst).tag(3, WireType.Varint).uint32(e.count);
      writer.join();
    }
  }
  return writer.finish();
}

export interface UtsnsEntry {
  nodename: string;
  domainname: string;
}

export function decodeUtsns(bytes: Uint8Array): UtsnsEntry {
  const entry: UtsnsEntry = { nodename: '', domainname: '' };
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, type] = reader.tag();
    if (field === 1 && type === WireType.LengthDelimited) entry.nodename = reader.string();
    else if (field === 2 && type === WireType.LengthDelimited) entry.domainname = reader.string();
    else reader.skip(type, field);
  }
  return entry;
}

export function encodeUtsns(entry: UtsnsEntry): Uint8Array {
  return new BinaryWriter().tag(1, WireType.LengthDelimited).string(entry.nodename).tag(2, WireType.LengthDelimited).string(entry.domainname).finish();
}

/** A new file in the link's place (the snapshot's file it was linked to is left as it was). */
async function replace(file: string, data: Buffer): Promise<void> {
  const temp = `${file}.new`;
  await writeFile(temp, data, { mode: 0o644, flag: 'wx' });
  await rename(temp, file);
}
