/**
 * A process of its own that takes a Firecracker session's snapshot as an orchestrator would,
 * for a test to kill -9 half-way (firecracker-snapshots.test.ts): the emulator's VMM is not its
 * child, so it outlives it as a real one outlives a killed orchestrator.
 *
 * argv: <workDir> <sessionId> <sessionDir> <vmm pid> <guest address> <snapshot dir>
 */
import { newRuntime } from './disk-pause-session.js';

const [workDir, sessionId, sessionDir, pid, host, dir] = process.argv.slice(2);
if (!workDir || !sessionId || !sessionDir || !pid || !host || !dir)
  throw new Error('usage: snapshot-child <workDir> <sessionId> <sessionDir> <pid> <host> <dir>');
await newRuntime(workDir).snapshot({ sessionId, sessionDir, pid: Number(pid), endpoint: { host, port: 22 } }, dir);
console.log('snapshotted');
