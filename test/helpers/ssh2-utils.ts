import ssh2 from 'ssh2';

/** ssh2 is CommonJS: its named exports are reached through the default import under ESM. */
export const utils = ssh2.utils;
