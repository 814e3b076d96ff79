import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { CONFIG_FILES, GUEST_USER } from '../guest/contract.js';
import type { ResourceNames } from '../network/names.js';
import { guestAddressOf } from '../network/netns.js';
import { publicKeyBlob } from '../transport/ssh-keys.js';
import { guestTransport, type GuestTransport } from '../transport/index.js';

/** A connection of the benchmark's own to a guest, from the files the orchestrator wrote. */
export async function openDirect(stateDir: string, names: ResourceNames, id: string): Promise<GuestTransport> {
  const sessionDir = path.join(stateDir, id);
  const hostPublicKey = await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKeyPub), 'utf8');
  const direct = guestTransport({
    endpoint: { host: await guestAddressOf(names, id), port: 22 },
    username: GUEST_USER,
    privateKey: await readFile(path.join(sessionDir, 'id_ed25519'), 'utf8'),
    pinnedHostKey: publicKeyBlob(hostPublicKey.trim()),
  });
  await direct.open(10_000);
  return direct;
}
