import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh, pngSize } from './helpers/guest.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

// A quiet time long enough that a busy machine's scheduling gaps do not look like a still screen.
const SETTLE = { settleMaxMs: 1_500, settleIntervalMs: 250 };
/**
 * Ends the loops that change the screen, and the terminals. "[w]hile" matches the loop's
 * command line but not this command's own (pkill -f would otherwise kill the shell running it).
 */
const STOP_CHANGES = 'pkill -f "[w]hile :; do xsetroot"; pkill -x xterm; pkill -x yes; sleep 0.3; true';

/**
 * Drives /usr/local/bin/sbx-capture on the display given as its argument, as the host does:
 * a whole frame, a root colour change, then the changed rectangles patched in; prints the
 * flags, the rectangles, the pixel at (5,5) and how many rectangles an unchanged screen sent.
 */
const FALLBACK_PROBE = `
import json, struct, subprocess, sys, time, zlib
env = {"DISPLAY": sys.argv[1]}
p = subprocess.Popen(["/usr/local/bin/sbx-capture"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
def ask():
    p.stdin.write(b"grab\\n"); p.stdin.flush()
    tag, w, h, stride, n = struct.unpack("<4sIIII", p.stdout.read(20))
    return tag, w, stride, p.stdout.read(n)
tag, w, stride, frame = ask()
assert tag == b"SBXF", tag
frame = bytearray(frame)
subprocess.run(["xsetroot", "-solid", "#102030"], env=env, check=True)
time.sleep(0.3)
tag, w, stride, data = ask()
assert tag == b"SBXR", tag
flags, count = struct.unpack("<II", data[:8])
rects, at = [], 8 + 20 * count
for i in range(count):
    x, y, rw, rh, n = struct.unpack("<IIIII", data[8 + 20 * i:28 + 20 * i])
    pixels = zlib.decompress(data[at:at + n]); at += n
    for row in range(rh):
        frame[(y + row) * stride + x * 4:(y + row) * stride + (x + rw) * 4] = pixels[row * rw * 4:(row + 1) * rw * 4]
    rects.append([x, y, rw, rh])
tag, w, stride, again = ask()
unchanged = struct.unpack("<II", again[:8])[1]
print(json.dumps({"flags": flags, "rects": rects, "pixel": list(frame[5 * stride + 20:5 * stride + 23]), "unchanged": unchanged}))
`;

/**
 * The damage-driven capture path (issue 13) on a real sandbox: the grabber reads only what
 * XDamage says changed, through MIT-SHM, and sends it compressed; the host patches its last
 * frame. After a screen that changed every frame, the API's screenshot must still hold
 * exactly the pixels scrot captures; and the settle after an action waits for the damage to
 * stop, not for two equal captures.
 */
describe('capture by damaged rectangles', () => {
  let orch: TestOrchestrator;
  let id: string;
  let guest: GuestTransport;

  const bash = async (command: string) => {
    const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command } });
    assert.equal(res.statusCode, 200, res.body);
    return res.json<{ is_error: boolean; content: Array<{ type: string; text?: string }> }>();
  };
  const screenshot = async () => {
    const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
    assert.equal(res.statusCode, 200, res.body);
    return res.rawPayload;
  };
  const sharpPixels = async (png: Buffer) => (await import('sharp')).default(png).removeAlpha().raw().toBuffer();

  before(async () => {
    orch = await startTestOrchestrator(SETTLE);
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 800, height: 600 } });
    assert.equal(res.statusCode, 201, res.body);
    id = res.json().id;
    guest = await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id));
  });
  after(async () => {
    guest?.close();
    await orch?.stop();
  });

  it('reads through MIT-SHM: the grabber has a System V segment shared with the X server', async () => {
    assert.deepEqual(pngSize(await screenshot()), { width: 800, height: 600 });
    const maps = await guestSh(guest, 'cat /proc/$(pgrep -f /usr/local/bin/sbx-capture | head -1)/maps');
    assert.match(maps.text, /SYSV/, 'a shared-memory segment is mapped in the grabber');
  });

  it('after a screen that changed every frame, the screenshot is pixel-identical to scrot', async () => {
    // Started with the bash tool, as a model would: a terminal printing as fast as it can and
    // the root window changing colour in a loop, both in their own process group.
    const started = await bash(
      'export DISPLAY=:99; (setsid xterm -geometry 60x20+10+10 -e yes >/dev/null 2>&1 &); ' +
        '(setsid sh -c "while :; do xsetroot -solid red; xsetroot -solid \\#0000ff; done" >/dev/null 2>&1 &); sleep 0.5; echo started',
    );
    assert.equal(started.is_error, false, JSON.stringify(started.content));
    const shots: Buffer[] = [];
    for (let i = 0; i < 15; i++) shots.push(await sharpPixels(await screenshot()));
    const distinct = new Set(shots.map((s) => s.toString('base64'))).size;
    assert.ok(distinct >= 3, `the screen changed between screenshots (${distinct} distinct of 15)`);

    // Stop the changes, and draw a known, detailed picture: xsetroot's plaid over the whole
    // root, and a terminal with known text on part of it.
    await guestSh(guest, STOP_CHANGES);
    const drawn = await guestSh(
      guest,
      'export DISPLAY=:99; xsetroot -mod 7 5 -fg "#13579b" -bg "#fedcba" && (setsid xterm -geometry 30x6+333+217 -e sh -c "echo capture-damage-pattern; sleep 600" >/dev/null 2>&1 &) ; sleep 1; echo ok',
    );
    assert.equal(drawn.exitCode, 0, drawn.stderr.toString());
    let same = false;
    for (let attempt = 0; attempt < 3 && !same; attempt++) {
      const ours = await screenshot();
      const scrot = (await guest.exec('DISPLAY=:99 scrot -')).stdout;
      assert.deepEqual(pngSize(ours), pngSize(scrot));
      same = (await sharpPixels(ours)).equals(await sharpPixels(scrot));
    }
    assert.ok(same, 'the API screenshot and scrot agree pixel for pixel');
  });

  it("small changes to a detailed screen (only their rows re-encoded on the host) are scrot's pixels each time", async () => {
    // The PNG of each changed frame reuses the compressed rows of the previous one where the
    // pixels did not change (src/computer/png/banded-png.ts): a stale or misplaced band would
    // show here as a difference from scrot.
    await guestSh(guest, `${STOP_CHANGES}; DISPLAY=:99 xsetroot -mod 3 7 -fg "#0a3f6c" -bg "#f1e2d3"; sleep 0.3`);
    await screenshot();
    const changes = [
      'xsetroot -solid "#c0ffee"; xsetroot -mod 3 7 -fg "#0a3f6c" -bg "#f1e2d4"', // every row, by one colour
      '(setsid xterm -geometry 12x1+40+300 -e sh -c "echo small-change; sleep 600" >/dev/null 2>&1 &)', // a few rows in the middle
      '(setsid xterm -geometry 8x1+700+0 -e sh -c "echo top; sleep 600" >/dev/null 2>&1 &)', // the first rows
      '(setsid xterm -geometry 8x1+0-0 -e sh -c "echo bottom; sleep 600" >/dev/null 2>&1 &)', // the last rows
    ];
    for (const change of changes) {
      const done = await guestSh(guest, `export DISPLAY=:99; ${change}; sleep 1; echo ok`);
      assert.equal(done.exitCode, 0, done.stderr.toString());
      let same = false;
      for (let attempt = 0; attempt < 3 && !same; attempt++) {
        const ours = await screenshot();
        const scrot = (await guest.exec('DISPLAY=:99 scrot -')).stdout;
        same = (await sharpPixels(ours)).equals(await sharpPixels(scrot));
      }
      assert.ok(same, `after "${change}", the API screenshot and scrot agree pixel for pixel`);
    }
  });

  it("an idle grabber gives its shared pages back, and the next screenshot is still scrot's pixels", async () => {
    // The whole root repainted, then captured: the segment holds a whole screen.
    await guestSh(guest, `${STOP_CHANGES}; DISPLAY=:99 xsetroot -solid "#123456"; sleep 0.3`);
    await screenshot();
    // Left idle for more than the grabber's IDLE_RELEASE_SECONDS (1 s).
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    const smaps = await guestSh(guest, 'cat /proc/$(pgrep -f /usr/local/bin/sbx-capture | head -1)/smaps');
    const segment = /SYSV[^\n]*\n(?:[^\n]*\n)*?Rss:\s+(\d+) kB/.exec(smaps.text);
    assert.ok(segment, 'the grabber maps its shared-memory segment');
    assert.ok(Number(segment[1]) <= 8, `the idle grabber's segment holds ${segment[1]} kB (an 800x600 screen is 1875 kB)`);

    // Pages gone, pixels not: a detailed picture is captured exactly afterwards.
    const drawn = await guestSh(guest, 'export DISPLAY=:99; xsetroot -mod 5 3 -fg "#2468ac" -bg "#fdb975"; sleep 0.3; echo ok');
    assert.equal(drawn.exitCode, 0, drawn.stderr.toString());
    let same = false;
    for (let attempt = 0; attempt < 3 && !same; attempt++) {
      const ours = await screenshot();
      const scrot = (await guest.exec('DISPLAY=:99 scrot -')).stdout;
      same = (await sharpPixels(ours)).equals(await sharpPixels(scrot));
    }
    assert.ok(same, 'the API screenshot and scrot agree pixel for pixel');
  });

  for (const [missing, flags, shape] of [
    ['MIT-SHM', 2, 'only the changed rectangle'],
    ['DAMAGE', 1, 'the whole screen every time'],
  ] as const) {
    it(`without ${missing} in the X server, the grabber says so and still sends the right pixels (${shape})`, async () => {
      // A second X server in the guest, started by the desktop user, without that extension.
      const display = missing === 'DAMAGE' ? 97 : 98;
      const result = await guest.exec(
        `Xvfb :${display} -screen 0 320x240x24 -extension ${missing} -nolisten tcp >/dev/null 2>&1 & x=$!
for i in $(seq 50); do [ -e /tmp/.X11-unix/X${display} ] && break; sleep 0.1; done
python3 -I - :${display}; status=$?; kill $x; exit $status`,
        { stdin: FALLBACK_PROBE, timeoutMs: 30_000 },
      );
      assert.equal(result.exitCode, 0, result.stderr.toString());
      const answer = JSON.parse(result.stdout.toString()) as { flags: number; rects: number[][]; pixel: number[]; unchanged: number };
      assert.equal(answer.flags, flags, `flags ${answer.flags}`);
      assert.deepEqual(answer.pixel, [0x30, 0x20, 0x10], 'the new root colour, BGR');
      if (missing === 'DAMAGE') assert.deepEqual(answer.rects, [[0, 0, 320, 240]]);
      else assert.ok(answer.rects.length >= 1 && answer.unchanged === 0, JSON.stringify(answer));
    });
  }

  it('settles on damage quiet time: a still screen within a few intervals, a changing one at the maximum', async () => {
    const act = async () => {
      const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/computer`, payload: { action: 'mouse_move', coordinate: [5, 5] } });
      assert.equal(res.statusCode, 200, res.body);
      return Number(res.headers['x-settle-ms']);
    };
    const still = await act();
    assert.ok(still >= SETTLE.settleIntervalMs && still < SETTLE.settleMaxMs, `a still screen settled in ${still} ms`);

    await guestSh(guest, 'export DISPLAY=:99; (setsid xterm -geometry 60x20+10+10 -e yes >/dev/null 2>&1 &); sleep 0.5');
    try {
      const busy = await act();
      assert.ok(busy >= SETTLE.settleMaxMs, `a screen that never stops changing is returned at the maximum (${busy} ms)`);
    } finally {
      await guestSh(guest, STOP_CHANGES);
    }
  });
});
