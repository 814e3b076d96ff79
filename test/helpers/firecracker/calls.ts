/** The calls of a cold boot, in order, as the runtime sends them (boot/boot-steps.ts). */
export const COLD_BOOT_CALLS = [
  'PUT /machine-config',
  'PUT /boot-source',
  'PUT /drives/rootfs',
  'PUT /drives/config',
  'PUT /network-interfaces/eth0',
  'PUT /vsock',
  'PUT /actions',
];
