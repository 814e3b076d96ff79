import type { components } from './spec-types.js';

/**
 * Names for the request and response bodies the runtime uses, taken from the types that
 * `npm run gen:firecracker` generates from the official spec (spec-types.ts). Nothing here
 * is written by hand: a field that changes in a new Firecracker release changes here too.
 */
type Schemas = components['schemas'];

export type MachineConfiguration = Schemas['MachineConfiguration'];
export type BootSource = Schemas['BootSource'];
export type Drive = Schemas['Drive'];
export type NetworkInterface = Schemas['NetworkInterface'];
export type Vsock = Schemas['Vsock'];
export type Logger = Schemas['Logger'];
export type Metrics = Schemas['Metrics'];
export type InstanceActionInfo = Schemas['InstanceActionInfo'];
export type ActionType = InstanceActionInfo['action_type'];
export type Vm = Schemas['Vm'];
export type VmState = Vm['state'];
export type SnapshotCreateParams = Schemas['SnapshotCreateParams'];
export type SnapshotLoadParams = Schemas['SnapshotLoadParams'];
export type NetworkOverride = Schemas['NetworkOverride'];
export type VsockOverride = Schemas['VsockOverride'];
export type InstanceInfo = Schemas['InstanceInfo'];
export type FirecrackerVersion = Schemas['FirecrackerVersion'];
/** The body of every error answer: `{"fault_message": "..."}`. */
export type FaultBody = Schemas['Error'];
