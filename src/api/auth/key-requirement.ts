import type { AuthMode } from './auth-mode.js';
import type { KeyStore } from './key-store.js';

/**
 * Whether a request without a key is refused, for the life of the process. In
 * `keyless-until-first-key` mode the first key made with `sbx keys create` (while the server
 * runs) turns keys on; from then on they stay on, whatever happens to the key table:
 * revoking the last key, or even deleting every row by hand, does not reopen the API to
 * anyone on the machine. Going back to keyless is a deliberate act: `sbx serve --no-auth`,
 * or `sbx keys reset --yes` and a restart.
 */
export class KeyRequirement {
  private required: boolean;

  constructor(
    readonly mode: AuthMode,
    private readonly keys: Pick<KeyStore, 'hasAnyKey'>,
    /** Told once, when the first key turns keys on. */
    private readonly onRequired: () => void = () => undefined,
  ) {
    this.required = mode === 'required';
  }

  keysRequired(): boolean {
    if (this.required || this.mode === 'keyless') return this.required;
    // One indexed read per keyless request: a key made with the CLI counts at once.
    if (this.keys.hasAnyKey()) {
      this.required = true;
      this.onRequired();
    }
    return this.required;
  }
}
