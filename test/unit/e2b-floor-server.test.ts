import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Sandbox as Desktop } from '@e2b/desktop';
import { E2bFloorServer } from '../../src/bench/e2b-floor-server.js';

// The e2b bench's floor is only a floor if the SDK takes its answers as a real envd's: a
// command that exited 0, a file of the size asked, and nothing else served.
const server = new E2bFloorServer();
let desktop: Desktop;
let url: string;

before(async () => {
  url = await server.listen();
  server.fileBody = Buffer.alloc(4321, 7);
  desktop = Reflect.construct(Desktop, [
    { apiKey: `e2b_${'0'.repeat(40)}`, sandboxUrl: url, sandboxId: 'floor', envdAccessToken: 'token', envdVersion: '0.5.7' },
  ]) as Desktop;
});
after(() => server.close());

test("the SDK's commands.run, screenshot() and leftClick() complete against the floor's server", async () => {
  const result = await desktop.commands.run('xdotool click 1');
  assert.equal(result.exitCode, 0);
  const shot = await desktop.screenshot();
  assert.equal(shot.length, 4321);
  assert.equal(shot[0], 7);
  await desktop.leftClick(10, 20);
});

test('anything else is 404', async () => {
  const res = await fetch(`${url}/filesystem.Filesystem/ListDir`, { method: 'POST', body: '{}' });
  assert.equal(res.status, 404);
});
