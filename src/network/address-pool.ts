/**
 * Leases one /30 block per sandbox from an IPv4 range: .1 is the host's end of the link
 * (the guest's gateway), .2 the guest. The lease index is stored with the session, so a
 * restarted orchestrator knows which blocks are taken.
 */
export interface AddressLease {
  index: number;
  /** Host side of the link, e.g. 10.241.0.1 */
  gateway: string;
  /** The guest's address, e.g. 10.241.0.2 */
  guest: string;
  prefixLength: 30;
}

function parseIPv4(text: string): number {
  const parts = text.split('.');
  if (parts.length !== 4) throw new Error(`not an IPv4 address: ${text}`);
  let value = 0;
  for (const part of parts) {
    const octet = Number(part);
    if (!/^\d{1,3}$/.test(part) || octet > 255) throw new Error(`not an IPv4 address: ${text}`);
    value = value * 256 + octet;
  }
  return value;
}

function formatIPv4(value: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join('.');
}

export class AddressPool {
  private readonly base: number;
  readonly size: number;
  private readonly taken = new Set<number>();

  constructor(readonly cidr: string) {
    const match = /^([\d.]+)\/(\d{1,2})$/.exec(cidr);
    if (!match) throw new Error(`subnet must look like 10.241.0.0/16, got "${cidr}"`);
    const prefix = Number(match[2]);
    if (prefix < 8 || prefix > 29) throw new Error(`subnet prefix must be between /8 and /29, got /${prefix}`);
    const blockSize = 2 ** (32 - prefix);
    this.base = parseIPv4(match[1] as string);
    if (this.base % blockSize !== 0) throw new Error(`subnet ${cidr} is not aligned to its prefix`);
    this.size = blockSize / 4;
  }

  /** Marks an index taken (used when rebuilding from the store). */
  claim(index: number): AddressLease {
    if (!Number.isInteger(index) || index < 0 || index >= this.size) throw new Error(`lease index ${index} is outside ${this.cidr}`);
    this.taken.add(index);
    return this.describe(index);
  }

  /** Takes the lowest free block. */
  lease(): AddressLease {
    for (let index = 0; index < this.size; index++) {
      if (!this.taken.has(index)) return this.claim(index);
    }
    throw new Error(`no free addresses left in ${this.cidr} (${this.size} sandboxes)`);
  }

  release(index: number): void {
    this.taken.delete(index);
  }

  get inUse(): number {
    return this.taken.size;
  }

  describe(index: number): AddressLease {
    const block = this.base + index * 4;
    return { index, gateway: formatIPv4(block + 1), guest: formatIPv4(block + 2), prefixLength: 30 };
  }
}
