import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import sharp from 'sharp';
import { parseAction } from '../src/computer/actions.js';
import { Scaler } from '../src/computer/scaling.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const SCREEN = { width: 1280, height: 800 };
const MODEL = { width: 800, height: 500 };
/**
 * The least PSNR (dB, over R, G and B) a lossy screenshot at quality 80 must keep against
 * scrot's pixels, on this test's screen: lines of text in 8 colours on coloured backgrounds,
 * the hardest screen measured (docs/benchmarks.md). JPEG (4:4:4 chroma) measured 33.6 dB on it
 * and 36-39 dB on plain xterm text; 4:2:0 chroma, which smears coloured text, gives ~29 dB, and a
 * channel order mistake far less, so 32 dB tells a good encoding from a broken one. Lossy WebP
 * (always 4:2:0) measured 26.6 dB here and ~30 dB on plain text (the reason webp's default is
 * lossless): its bound is 25, still far above a broken encoding.
 */
const MIN_PSNR_DB = { jpeg: 32, webp: 25 } as const;

interface Rgb {
  width: number;
  height: number;
  pixels: Buffer;
}

async function rgbOf(image: Buffer): Promise<Rgb> {
  const { data, info } = await sharp(image).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  return { width: info.width, height: info.height, pixels: data };
}

function psnr(a: Rgb, b: Rgb): number {
  assert.deepEqual([a.width, a.height], [b.width, b.height]);
  let squared = 0;
  for (let i = 0; i < a.pixels.length; i++) squared += (a.pixels[i]! - b.pixels[i]!) ** 2;
  const mse = squared / a.pixels.length;
  return mse === 0 ? Infinity : 10 * Math.log10((255 * 255) / mse);
}

/**
 * Screenshots in every format on a real sandbox, against what scrot captures in the guest at
 * the same moment: a static screen drawn by the test (coloured text in a full-screen xterm on a
 * coloured root, nothing blinking). PNG and lossless WebP must match scrot pixel for pixel,
 * scaled and zoomed too; JPEG and lossy WebP must stay above a PSNR bound.
 */
describe('screenshot formats, end to end', () => {
  let orch: TestOrchestrator;
  let id: string;
  let guest: GuestTransport;
  let scrot: Rgb;

  const get = (url: string) => orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}${url}` });
  const post = (url: string, payload: Record<string, unknown>) => orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}${url}`, payload });

  /** scrot's pixels, and proof the screen is static: two scrot captures around a check agree. */
  async function scrotNow(): Promise<Rgb> {
    return rgbOf((await guest.exec('DISPLAY=:99 scrot -', { timeoutMs: 20_000 })).stdout);
  }

  /** Runs `check` between two scrot captures until they agree (a repaint may land between). */
  async function againstScrot(check: (reference: Rgb) => Promise<void>): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const before = await scrotNow();
      try {
        await check(before);
      } catch (err) {
        const after = await scrotNow();
        if (after.pixels.equals(before.pixels) || attempt >= 2) throw err;
        continue;
      }
      return;
    }
  }

  before(async () => {
    orch = await startTestOrchestrator();
    const res = await orch.server.inject({
      method: 'POST',
      url: '/v1/sessions',
      payload: { ...SCREEN, scaling: MODEL, toolVersion: 'computer_20251124', screenshot: { format: 'webp', quality: 100 } },
    });
    assert.equal(res.statusCode, 201, res.body);
    id = res.json().id;
    assert.deepEqual(res.json().screenshot, { format: 'webp', quality: 100 }, 'the session view shows its default');
    guest = await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id));
    // The frame: a coloured root, and a full-screen xterm of coloured text, block cursor not blinking.
    const draw = [
      'for i in $(seq 1 40); do',
      '  printf "\\033[3%dm%03d the quick brown fox \\033[4%dm jumps over \\033[0m the lazy dog ~!@#$%%^&*() [{}] <> |/ \\n" $((i % 8)) $i $(((i + 3) % 8))',
      'done',
      'exec sleep 1000',
    ].join('\n');
    await guest.exec('cat > /tmp/draw.sh', { stdin: draw, timeoutMs: 20_000 });
    await guestSh(
      guest,
      'export DISPLAY=:99; xsetroot -solid "#3a6ea5"; ' +
        'setsid -f xterm -T formats -geometry 150x45+0+0 -bg "#101820" -fg "#f2e8c8" -e sh /tmp/draw.sh </dev/null >/dev/null 2>&1; ' +
        'xdotool search --sync --onlyvisible --name "^formats$" >/dev/null; sleep 0.5',
    );
    scrot = await scrotNow();
    assert.deepEqual([scrot.width, scrot.height], [SCREEN.width, SCREEN.height]);
  });
  after(async () => {
    guest?.close();
    await orch?.stop();
  });

  it("the screenshot route answers in each format with its Content-Type; png and lossless webp are scrot's pixels", async () => {
    const cases = [
      { query: '?format=png', type: 'image/png', exact: true },
      { query: '', type: 'image/webp', exact: true }, // the session's default: webp at 100, lossless
      { query: '?format=webp&quality=100', type: 'image/webp', exact: true },
      { query: '?format=webp', type: 'image/webp', exact: true }, // webp's default quality: lossless
      { query: '?format=jpeg&quality=80', type: 'image/jpeg', min: MIN_PSNR_DB.jpeg },
      { query: '?format=jpeg', type: 'image/jpeg', min: MIN_PSNR_DB.jpeg }, // default quality 80
      { query: '?format=webp&quality=80', type: 'image/webp', min: MIN_PSNR_DB.webp },
    ];
    for (const c of cases) {
      await againstScrot(async (reference) => {
        const res = await get(`/screenshot${c.query}`);
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.headers['content-type'], c.type, c.query);
        const ours = await rgbOf(res.rawPayload);
        assert.equal((await sharp(res.rawPayload).metadata()).format, c.type.slice('image/'.length));
        if (c.exact) assert.ok(ours.pixels.equals(reference.pixels), `${c.query || 'default'}: pixel-identical to scrot`);
        else {
          const db = psnr(ours, reference);
          console.log(`# ${c.query}: PSNR ${db.toFixed(1)} dB`);
          assert.ok(db >= c.min!, `${c.query}: PSNR ${db.toFixed(1)} dB, at least ${c.min} dB`);
          assert.ok(db < 60, `${c.query}: lossy, so not exact (${db.toFixed(1)} dB)`);
        }
      });
    }
  });

  it('scaled screenshots in each format: exact where lossless (scrot scaled the same way)', async () => {
    for (const [query, exact] of [
      ['format=png', true],
      ['format=webp&quality=100', true],
      ['format=jpeg&quality=80', false],
    ] as const) {
      await againstScrot(async (reference) => {
        const res = await get(`/screenshot?scaled=true&${query}`);
        assert.equal(res.statusCode, 200, res.body);
        const ours = await rgbOf(res.rawPayload);
        const expected = await rgbOf(
          await sharp(reference.pixels, { raw: { width: reference.width, height: reference.height, channels: 3 } })
            .resize(MODEL.width, MODEL.height, { fit: 'fill' })
            .png()
            .toBuffer(),
        );
        if (exact) assert.ok(ours.pixels.equals(expected.pixels), `${query}: scaled pixels are scrot's, scaled`);
        else assert.ok(psnr(ours, expected) >= MIN_PSNR_DB.jpeg, `${query}: PSNR ${psnr(ours, expected).toFixed(1)} dB`);
      });
    }
  });

  it('zoom and the screenshot after an action honour ?format; tool results carry the media type', async () => {
    const input = { action: 'zoom', region: [100, 100, 300, 225] };
    const region = (parseAction(input, new Scaler(SCREEN, MODEL)) as { region: { x0: number; y0: number; x1: number; y1: number } }).region;
    for (const [query, mediaType] of [
      ['?format=png', 'image/png'],
      ['', 'image/webp'],
    ] as const) {
      await againstScrot(async (reference) => {
        const res = await post(`/actions${query}`, input);
        assert.equal(res.statusCode, 200, res.body);
        assert.equal(res.json().image.mediaType, mediaType);
        const ours = await rgbOf(Buffer.from(res.json().image.data, 'base64'));
        const cut = await sharp(reference.pixels, { raw: { width: reference.width, height: reference.height, channels: 3 } })
          .extract({ left: region.x0, top: region.y0, width: region.x1 - region.x0, height: region.y1 - region.y0 })
          .raw()
          .toBuffer();
        assert.ok(ours.pixels.equals(cut), `zoom${query}: the region at full resolution, exactly`);
      });
    }
    // After an action (the pointer moves; neither scrot nor the grabber draws it: same frame).
    const moved = await post('/actions?screenshot=true&format=jpeg&quality=90', { action: 'mouse_move', coordinate: [10, 10] });
    assert.equal(moved.statusCode, 200, moved.body);
    assert.equal(moved.json().image.mediaType, 'image/jpeg');
    assert.equal((await sharp(Buffer.from(moved.json().image.data, 'base64')).metadata()).width, MODEL.width);
    // The computer tool: the session's default, or the loop's choice, with the right media_type.
    for (const [query, mediaType] of [
      ['', 'image/webp'],
      ['?format=jpeg', 'image/jpeg'],
      ['?format=png', 'image/png'],
    ] as const) {
      const res = await post(`/tools/computer${query}`, { action: 'screenshot' });
      assert.equal(res.statusCode, 200, res.body);
      const [block] = res.json().content as Array<{ type: string; source: { type: string; media_type: string; data: string } }>;
      assert.equal(block?.type, 'image');
      assert.equal(block?.source.type, 'base64');
      assert.equal(block?.source.media_type, mediaType);
      const meta = await sharp(Buffer.from(block.source.data, 'base64')).metadata();
      assert.deepEqual([meta.format, meta.width, meta.height], [mediaType.slice('image/'.length), MODEL.width, MODEL.height]);
    }
  });

  it('red team: a flood of costly encodings from one session holds one encoding at a time in the pool', async (t) => {
    // 40 distinct qualities at once, so that the cache cannot help: each one is encoded. libvips
    // runs them on libuv's thread pool (4 threads, shared with file I/O); without the session's
    // encode queue they would all wait there at once, ahead of every other session's work.
    let most = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { queue, process } = sharp.counters();
        most = Math.max(most, queue + process);
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
    })();
    const started = performance.now();
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => get(`/screenshot?format=webp&quality=${40 + i}`)));
    const took = performance.now() - started;
    sampling = false;
    await sampler;
    assert.deepEqual(new Set(answers.map((r) => r.statusCode)), new Set([200]));
    t.diagnostic(`40 lossy webp screenshots at once took ${took.toFixed(0)} ms; at most ${most} sharp tasks queued or running`);
    // One encoding is three channel extractions in parallel, then the join and encode.
    assert.ok(most <= 3, `at most one encoding's tasks at a time, saw ${most}`);
  });

  it('the OpenAPI document lists the formats on every route that returns an image', async () => {
    const spec = (await orch.server.inject({ method: 'GET', url: '/openapi.json' })).json();
    const queryOf = (route: string, method: string) =>
      (spec.paths[route][method].parameters as Array<{ in: string; name: string; schema: { enum?: string[] } }>).filter((p) => p.in === 'query');
    for (const [route, method] of [
      ['/v1/sessions/{id}/screenshot', 'get'],
      ['/v1/sessions/{id}/actions', 'post'],
      ['/v1/sessions/{id}/tools/computer', 'post'],
    ] as const) {
      const names = queryOf(route, method).map((p) => p.name);
      assert.ok(names.includes('format') && names.includes('quality'), `${route}: ${names.join(', ')}`);
    }
    assert.deepEqual(queryOf('/v1/sessions/{id}/screenshot', 'get').find((p) => p.name === 'format')?.schema.enum, ['png', 'jpeg', 'webp']);
    assert.deepEqual(
      spec.paths['/v1/sessions/{id}/screenshot'].get.responses['200'].content &&
        Object.keys(spec.paths['/v1/sessions/{id}/screenshot'].get.responses['200'].content).sort(),
      ['image/jpeg', 'image/png', 'image/webp'],
    );
    const create = spec.paths['/v1/sessions'].post.requestBody.content['application/json'].schema.properties.screenshot;
    assert.deepEqual(create.properties.format.enum, ['png', 'jpeg', 'webp']);
    assert.deepEqual([create.properties.quality.minimum, create.properties.quality.maximum], [1, 100]);
  });

  it('a bad format or quality is a 400 naming the field, and a tool error the model can read', async () => {
    const bad: Array<[string, RegExp]> = [
      ['/screenshot?format=gif', /format/],
      ['/screenshot?format=jpeg&quality=0', /quality/],
      ['/screenshot?format=jpeg&quality=101', /quality/],
      ['/screenshot?format=webp&quality=abc', /quality/],
      ['/screenshot?format=png&quality=50', /^quality applies to jpeg and webp only/],
    ];
    for (const [url, message] of bad) {
      const res = await get(url);
      assert.equal(res.statusCode, 400, `${url}: ${res.body}`);
      assert.equal(res.json().error.code, 'invalid_request');
      assert.match(res.json().error.message, message, url);
    }
    // A bad format on an action is refused before the action runs: the pointer stays put.
    await post('/actions', { action: 'mouse_move', coordinate: [50, 50] });
    for (const query of ['format=bmp', 'format=png&quality=50']) {
      const refused = await post(`/actions?screenshot=true&${query}`, { action: 'mouse_move', coordinate: [400, 300] });
      assert.equal(refused.statusCode, 400, refused.body);
      assert.match(refused.json().error.message, /format|quality/);
    }
    assert.equal((await post('/actions', { action: 'cursor_position' })).json().output, 'X=50,Y=50');
    // The computer tool: a tool_result with is_error, whose text says what to fix.
    for (const [query, message] of [
      ['?format=tiff', /^format must be one of png, jpeg, webp/],
      ['?format=jpeg&quality=1000', /^quality must be an integer from 1 to 100/],
      ['?format=png&quality=80', /^quality applies to jpeg and webp only/],
    ] as const) {
      const res = await post(`/tools/computer${query}`, { action: 'screenshot' });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().is_error, true);
      assert.match(res.json().content[0].text, message);
    }
    // At create: the field is named, and nothing is made.
    for (const [screenshot, message] of [
      [{ format: 'gif' }, /screenshot\/format/],
      [{ format: 'jpeg', quality: 0 }, /screenshot\/quality/],
      [{ quality: 50 }, /^screenshot\.quality applies to jpeg and webp only/],
      [{ format: 'png', extra: 1 }, /screenshot/],
    ] as const) {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { screenshot } });
      assert.equal(res.statusCode, 400, res.body);
      assert.match(res.json().error.message, message);
    }
    assert.equal(orch.manager.list().length, 1, 'no session was made by a refused create');
  });
});
