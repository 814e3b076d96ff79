/**
 * A session that mounts volumes is placed on the node whose disk holds them (docs/volumes.md,
 * "through a gateway"). The directory says where each of the tenant's volumes is; a create
 * naming volumes on two nodes cannot be placed (409 volumes_on_different_nodes, naming them),
 * and one naming a volume the tenant does not have (another tenant's included) is the node's
 * own 404. The client names volumes, never a node: the node comes from the directory.
 */
import { OrchestratorError } from '../../errors.js';
import { checkVolumeMounts } from '../../volumes/volume-names.js';
import type { PlacementRequest } from '../placement.js';
import type { ClusterState } from './cluster-state.js';

/** The placement's pin for the create's volumes (none: no pin). Checked as a node checks them, so a bad list is the same 400. */
export async function volumesOf(state: ClusterState, tenant: string, volumes: unknown): Promise<Pick<PlacementRequest, 'volumes'>> {
  const names = checkVolumeMounts(volumes).map((mount) => mount.name);
  if (names.length === 0) return {};
  const entries = await Promise.all(names.map((name) => state.call('lookupVolume', (store) => store.lookupVolume(tenant, name))));
  const nodes = new Map<string, string[]>();
  entries.forEach((entry, i) => {
    const name = names[i] as string;
    // As the node says it (volumes/volumes.ts); a volume still being made cannot be mounted yet.
    if (!entry || entry.state !== 'ready') throw new OrchestratorError('volume_not_found', `no volume ${JSON.stringify(name)}`);
    nodes.set(entry.node, [...(nodes.get(entry.node) ?? []), name]);
  });
  if (nodes.size > 1) {
    const where = [...nodes].map(([node, on]) => `${on.join(', ')} on '${node}'`).join('; ');
    throw new OrchestratorError(
      'volumes_on_different_nodes',
      `volumes: a session's volumes must all be on one node, and these are not (${where}); a volume lives on the node where it was made`,
    );
  }
  return { volumes: { node: [...nodes.keys()][0] as string, names } };
}
