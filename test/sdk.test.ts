import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { InvalidRequestError, NotFoundError, PermissionDeniedError, resultText, SandboxClient, type Sandbox } from '../src/client/index.js';
import { pngSize } from './helpers/guest.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

describe('the TypeScript SDK over real HTTP', () => {
  let orch: TestOrchestrator;
  let sandbox: Sandbox;

  before(async () => {
    orch = await startTestOrchestrator({}, true);
    const address = orch.server.server.address();
    assert.ok(address && typeof address === 'object');
    const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
    sandbox = await client.create({ width: 1280, height: 800, scaling: { width: 640, height: 400 }, toolVersion: 'computer_20251124' });
  });
  after(async () => {
    await sandbox?.destroy().catch(() => undefined);
    await orch?.stop();
  });

  it('describes a tool definition for the Messages API in the declared model space', () => {
    assert.deepEqual(sandbox.info.computerTool, {
      type: 'computer_20251124',
      name: 'computer',
      display_width_px: 640,
      display_height_px: 400,
      enable_zoom: true,
    });
  });

  it('has a method per action, in the model space', async () => {
    await sandbox.mouseMove(320, 200);
    assert.deepEqual(await sandbox.cursorPosition(), { x: 320, y: 200 });
    await sandbox.leftClick(10, 10);
    await sandbox.rightClick();
    await sandbox.doubleClick(20, 20, 'shift');
    await sandbox.tripleClick(30, 30);
    await sandbox.middleClick();
    await sandbox.leftClickDrag([100, 100], [50, 50]);
    await sandbox.leftMouseDown();
    await sandbox.leftMouseUp();
    await sandbox.scroll('down', 2, [320, 200], 'ctrl');
    await sandbox.key('Escape');
    await sandbox.type('hi');
    await sandbox.holdKey('shift', 0.1);
    await sandbox.wait(0);
    assert.deepEqual(pngSize(await sandbox.zoom([0, 0, 320, 200])), { width: 640, height: 400 });
    assert.deepEqual(pngSize(await sandbox.screenshot()), { width: 1280, height: 800 });
    assert.deepEqual(pngSize(await sandbox.screenshot({ scaled: true })), { width: 640, height: 400 });
    await assert.rejects(sandbox.mouseMove(640, 0), InvalidRequestError);
  });

  it('asks for screenshots in jpeg and webp, and gets the right media type back', async () => {
    const sharp = (await import('sharp')).default;
    const meta = async (image: Buffer) => sharp(image).metadata();
    const jpeg = await meta(await sandbox.screenshot({ format: 'jpeg', quality: 70 }));
    assert.deepEqual([jpeg.format, jpeg.width, jpeg.height], ['jpeg', 1280, 800]);
    const webp = await meta(await sandbox.screenshot({ scaled: true, format: 'webp' }));
    assert.deepEqual([webp.format, webp.width, webp.height], ['webp', 640, 400]);
    const moved = await sandbox.action({ action: 'mouse_move', coordinate: [10, 10] }, { screenshot: true, format: 'webp', quality: 100 });
    assert.equal(moved.image?.mediaType, 'image/webp');
    const tool = await sandbox.executeToolUse({ action: 'screenshot' }, 'computer', { format: 'jpeg' });
    assert.ok(tool.content[0]?.type === 'image');
    assert.equal(tool.content[0].source.media_type, 'image/jpeg');
    await assert.rejects(
      sandbox.screenshot({ format: 'png', quality: 50 }),
      (err: unknown) => err instanceof InvalidRequestError && /quality/.test(err.message),
    );
  });

  it('forwards tool_use inputs unchanged and returns tool_result content', async () => {
    const shot = await sandbox.executeToolUse({ action: 'screenshot' });
    assert.equal(shot.is_error, false);
    const block = shot.content[0];
    assert.ok(block?.type === 'image');
    assert.deepEqual(pngSize(Buffer.from(block.source.data, 'base64')), { width: 640, height: 400 });
    const click = await sandbox.executeToolUse({ action: 'left_click', coordinate: [5, 5] });
    assert.equal(click.is_error, false);
    assert.equal(click.content[0]?.type, 'image', 'an action returns the settled screen');
    const wrong = await sandbox.executeToolUse({ action: 'left_click', coordinate: [5, 5], text: 'x' });
    assert.deepEqual(wrong, { content: [{ type: 'text', text: 'text is not accepted for left_click' }], is_error: true });
  });

  it('runs the companion tools: a persistent shell and the text editor', async () => {
    assert.equal((await sandbox.bash('cd /tmp && export GREETING=hello')).is_error, false);
    assert.equal(resultText(await sandbox.bash('echo "$GREETING from $(pwd)"')).trim(), 'hello from /tmp');
    const created = await sandbox.editor({ command: 'create', path: '/tmp/note.txt', file_text: 'one\ntwo\n' });
    assert.equal(created.is_error, false, resultText(created));
    assert.match(resultText(await sandbox.editor({ command: 'view', path: '/tmp/note.txt' })), /1\tone\n\s*2\ttwo/);
    await sandbox.restartBash();
    assert.equal(resultText(await sandbox.bash('echo "[$GREETING]"')).trim(), '[]');
  });

  it('uploads and downloads files', async () => {
    const data = Buffer.from('naïve café ✓\n'.repeat(1000));
    assert.deepEqual(await sandbox.upload('/tmp/upload.txt', data), { path: '/tmp/upload.txt', size: data.length });
    assert.ok((await sandbox.download('/tmp/upload.txt')).equals(data));
    assert.match(resultText(await sandbox.bash('wc -c < /tmp/upload.txt')), new RegExp(`^${data.length}`));
    await assert.rejects(sandbox.download('/tmp/nope'), NotFoundError);
    await assert.rejects(sandbox.upload('/etc/forbidden', 'x'), PermissionDeniedError);
  });
});
