import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HubClient, type HubEvent } from '@home-hub-cloud/hub-client';
import { createAdmission, startLoopDelayMonitor } from '../../src/tunnel/admission';
import { createUser, startTestService, type TestService } from '../support/harness';
import { connect, deviceToken, refusal, registerHub } from '../support/tunnel';

/**
 * Handshake admission (src/tunnel/admission.ts): device handshakes at a pace per process,
 * the rest refused with `rate_limited` and `data: {retryAfter}` (decisions §5), each refused
 * hub sent to its own later second; app handshakes never held back.
 */

describe('the admission pace', () => {
  test('a burst of one second is admitted; the rest are booked one after another over the following seconds', () => {
    let t = 1_000_000;
    const admission = createAdmission({ perSecond: 10, now: () => t });
    const answers = Array.from({ length: 40 }, () => admission.decide());
    expect(answers.slice(0, 10)).toEqual(Array(10).fill(null));
    // 30 refused at 10 per second: told 1, 1, ..., 2, ..., 3 seconds.
    expect(answers.slice(10)).toEqual([...Array(10).fill(1), ...Array(10).fill(2), ...Array(10).fill(3)]);
    expect(admission.stats()).toMatchObject({ admitted: 10, refused: 30 });
    // A second later the bucket holds ten again.
    t += 1000;
    expect(Array.from({ length: 10 }, () => admission.decide())).toEqual(Array(10).fill(null));
  });

  test('a clock with fractions of a millisecond (performance.now) books a second as one second', () => {
    const admission = createAdmission({ perSecond: 1, window: false, now: () => 1988.623182 });
    expect([admission.decide(), admission.decide(), admission.decide()]).toEqual([null, 1, 2]);
  });

  test('never sends anyone further than the latest second', () => {
    const admission = createAdmission({ perSecond: 1, maxRetryAfterSeconds: 5, now: () => 0 });
    const answers = Array.from({ length: 20 }, () => admission.decide());
    expect(Math.max(...answers.map((a) => a ?? 0))).toBe(5);
  });
});

describe('the in-flight window', () => {
  test('past the window a hub is refused until one in flight is answered', () => {
    let t = 0;
    const admission = createAdmission({ perSecond: 0, window: { initial: 4, min: 2, targetMs: 1000 }, now: () => t });
    // Nothing answered yet: refused hubs are booked a second apart.
    expect(Array.from({ length: 6 }, () => admission.decide())).toEqual([null, null, null, null, 1, 2]);
    // Answered slowly (past the target): the window shrinks, to no fewer than `min`.
    t = 1500;
    admission.settled(0);
    expect(admission.stats()).toMatchObject({ inFlight: 3, window: 3 });
    expect(admission.decide()).not.toBeNull();
    // Within the same target period it does not shrink again.
    admission.settled(0);
    expect(admission.stats()).toMatchObject({ inFlight: 2, window: 3 });
    expect(admission.decide()).toBeNull();
    expect(admission.decide()).not.toBeNull();
  });

  test('handshakes answered within the target widen it, one place each', () => {
    let t = 0;
    const admission = createAdmission({ perSecond: 0, window: { initial: 2, max: 3, targetMs: 1000 }, now: () => t });
    expect([admission.decide(), admission.decide(), admission.decide()]).toEqual([null, null, 1]);
    t = 100;
    admission.settled(0);
    admission.settled(0);
    expect(admission.stats()).toMatchObject({ inFlight: 0, window: 3 });
    expect([admission.decide(), admission.decide(), admission.decide(), admission.decide()]).toEqual([null, null, null, expect.any(Number)]);
  });

  test('refused hubs are spread at the rate the process answers', () => {
    let t = 0;
    const admission = createAdmission({ perSecond: 0, window: { initial: 1, min: 1, max: 1, targetMs: 60_000 }, now: () => t });
    // Two answered per second, measured over a second.
    for (let i = 0; i < 4; i++) {
      expect(admission.decide()).toBeNull();
      t += 500;
      admission.settled(t - 500);
    }
    expect(admission.decide()).toBeNull();
    const waits = Array.from({ length: 6 }, () => admission.decide());
    expect(waits).toEqual([1, 1, 2, 2, 3, 3]);
  });

  test('with a pace, refused hubs are booked at the pace, not at a slower rate measured while the process was cold', () => {
    let t = 0;
    const admission = createAdmission({ perSecond: 100, window: false, now: () => t });
    // A cold start: 20 handshakes answered over two seconds of work (10 a second).
    for (let i = 0; i < 20; i++) {
      expect(admission.decide()).toBeNull();
      t += 100;
      admission.settled(t - 100);
    }
    // The bucket is spent; 300 refused are sent over three seconds (100 a second), not thirty.
    for (let i = 0; i < 100; i++) admission.decide();
    const waits = Array.from({ length: 300 }, () => admission.decide());
    expect(waits.every((w) => w !== null)).toBe(true);
    expect(Math.max(...waits.map((w) => w ?? 0))).toBeLessThanOrEqual(4);
    expect(admission.stats().pace).toBe(100);
  });

  test('time with nothing in flight does not count: the first answers after a quiet spell say the rate they came at', () => {
    let t = 0;
    let delay = 0;
    const admission = createAdmission({ perSecond: 0, window: false, loopDelay: () => delay, now: () => t });
    // Ten seconds of nothing (a process just started), then 100 handshakes answered within a second.
    t = 10_000;
    for (let i = 0; i < 100; i++) expect(admission.decide()).toBeNull();
    for (let i = 0; i < 100; i++) {
      t += 10;
      admission.settled(10_000);
    }
    // One in flight while the loop runs late.
    expect(admission.decide()).toBeNull();
    delay = 800;
    // 300 refused: three seconds of the process's work at 100 a second, not 60 at one.
    const waits = Array.from({ length: 300 }, () => admission.decide());
    expect(waits.at(-1)).toBe(3);
  });

  test('a stall does not send refused hubs further than the rate the process had just before', () => {
    let t = 0;
    let delay = 0;
    const admission = createAdmission({ perSecond: 0, window: false, loopDelay: () => delay, maxLoopDelayMs: 500, now: () => t });
    // Ten answered per second for two seconds.
    for (let i = 0; i < 20; i++) {
      expect(admission.decide()).toBeNull();
      t += 100;
      admission.settled(t - 100);
    }
    // A stall: one answer in the next second, and the loop runs late.
    expect(admission.decide()).toBeNull();
    t += 1000;
    admission.settled(t - 1000);
    // One in flight while the loop runs late.
    expect(admission.decide()).toBeNull();
    delay = 800;
    // Twenty refused, booked at about ten a second (the best rate of the last seconds, fading), not one.
    const waits = Array.from({ length: 20 }, () => admission.decide());
    expect(waits.every((w) => w !== null)).toBe(true);
    expect(waits.at(-1)).toBe(3);
  });
});

describe('the event loop\'s delay', () => {
  test('while the loop runs late every device handshake is refused at once, and the window closes to what was in flight', () => {
    let t = 0;
    let delay = 0;
    const admission = createAdmission({ perSecond: 0, window: { initial: 100, min: 2, targetMs: 1000 }, loopDelay: () => delay, maxLoopDelayMs: 500, now: () => t });
    expect(Array.from({ length: 10 }, () => admission.decide())).toEqual(Array(10).fill(null));
    // Late: refused with a retryAfter, though the window had room.
    delay = 800;
    const refused = admission.decide();
    expect(refused).toEqual(expect.any(Number));
    expect(admission.stats()).toMatchObject({ admitted: 10, refused: 1, refusedLate: 1, inFlight: 10, window: 9 });
    // On time again: the narrower window holds (10 in flight, 9 places); answers on time widen it again.
    delay = 100;
    expect(admission.decide()).not.toBeNull();
    t = 200;
    admission.settled(0);
    admission.settled(0);
    expect(admission.stats()).toMatchObject({ inFlight: 8, window: 11 });
    expect([admission.decide(), admission.decide(), admission.decide(), admission.decide()]).toEqual([null, null, null, expect.any(Number)]);
    expect(admission.stats()).toMatchObject({ refusedLate: 1 });
  });

  test('a late answer closes the window to a tenth below what was in flight, not below what it was', () => {
    let t = 0;
    const admission = createAdmission({ perSecond: 0, window: { initial: 1000, min: 2, targetMs: 1000 }, now: () => t });
    for (let i = 0; i < 20; i++) expect(admission.decide()).toBeNull();
    t = 5000;
    admission.settled(0);
    // 20 were in flight when it came: 18, not 900.
    expect(admission.stats()).toMatchObject({ inFlight: 19, window: 18 });
    expect(admission.decide()).not.toBeNull();
  });

  test('a late loop with nothing in flight refuses nothing and leaves the window as it was', () => {
    let t = 0;
    let delay = 0;
    const admission = createAdmission({ perSecond: 0, window: { initial: 64, min: 16, targetMs: 1000 }, loopDelay: () => delay, maxLoopDelayMs: 500, now: () => t });
    // A stall, a process resumed after a stop, a start: late, and no handshake is why.
    delay = 5000;
    t = 10_000;
    expect(admission.decide()).toBeNull();
    expect(admission.stats()).toMatchObject({ admitted: 1, refused: 0, refusedLate: 0, inFlight: 1, window: 64 });
    // With one in flight, still late: refused, and the window closes to its least.
    expect(admission.decide()).toEqual(expect.any(Number));
    expect(admission.stats()).toMatchObject({ refusedLate: 1, inFlight: 1, window: 16 });
  });

  /**
   * A monitor ticking every 50 ms on a clock of the test's: `ticks` fires one tick per entry,
   * each that many ms late, and says what the monitor says after each.
   */
  const withMonitor = (run: (ticks: (lates: readonly number[]) => number[], monitor: { current: () => number }) => void): void => {
    jest.useFakeTimers();
    let t = 0;
    const monitor = startLoopDelayMonitor(50, () => t);
    try {
      run(
        (lates) =>
          lates.map((late) => {
            t += 50 + late;
            jest.advanceTimersByTime(50);
            return monitor.current();
          }),
        monitor,
      );
    } finally {
      monitor.stop();
      jest.useRealTimers();
    }
  };

  test('the monitor says how late the loop has been persistently: late on every tick for a second', () => {
    withMonitor((ticks) => {
      // Not known before a second of ticks.
      expect(ticks(Array(19).fill(0))).toEqual(Array(19).fill(0));
      // Late tick after tick: said once the late ticks cover a second (and three ticks), as the least of them.
      expect(ticks([600, 700, 650])).toEqual([0, 0, 600]);
      expect(ticks([800])).toEqual([650]);
      // One tick on time, and it is not late persistently any more.
      expect(ticks([0, 600])).toEqual([0, 0]);
    });
  });

  test('a single pause of the loop, at the start or later, is not a loop running late', () => {
    withMonitor((ticks) => {
      // Startup work right after the monitor started: the first tick comes 3 s late.
      expect(ticks([3000, 0, 0])).toEqual([0, 0, 0]);
      expect(ticks(Array(20).fill(0))).toEqual(Array(20).fill(0));
      // A process stopped for 12 s and resumed, or a long GC pause: one late tick, then ticks on time.
      expect(ticks([12_000, 0, 0, 0])).toEqual([0, 0, 0, 0]);
      // Two pauses in a row are not a second of lateness either.
      expect(ticks([400, 400, 0])).toEqual([0, 0, 0]);
    });
  });

  test('a clock that does not advance keeps the monitor bounded and saying nothing', () => {
    withMonitor((_ticks, monitor) => {
      jest.advanceTimersByTime(50 * 10_000);
      expect(monitor.current()).toBe(0);
    });
  });
});

describe('a clock stepped back', () => {
  test('the pace refills nothing for the step: once the clock moves on again, the bucket fills as it would have', () => {
    let t = 1_800_000_000_000;
    const admission = createAdmission({ perSecond: 10, window: false, now: () => t });
    expect(Array.from({ length: 10 }, () => admission.decide())).toEqual(Array(10).fill(null));
    expect(admission.decide()).toBe(1);
    t -= 3_600_000;
    // Refused (the bucket is empty), and booked from the clock as it is now: the next second.
    expect(admission.decide()).toBe(1);
    t += 1000;
    expect(Array.from({ length: 10 }, () => admission.decide())).toEqual(Array(10).fill(null));
  });

  test('busy time is not counted backwards: the rate measured after the step is the rate handshakes are answered at', () => {
    let t = 1_800_000_000_000;
    let delay = 0;
    const admission = createAdmission({ perSecond: 0, window: false, loopDelay: () => delay, now: () => t });
    // Two answered a second, for two seconds.
    for (let i = 0; i < 4; i++) {
      expect(admission.decide()).toBeNull();
      t += 500;
      admission.settled(t - 500);
    }
    // An hour back while 110 are in flight, answered at a hundred a second.
    for (let i = 0; i < 110; i++) expect(admission.decide()).toBeNull();
    t -= 3_600_000;
    for (let i = 0; i < 110; i++) {
      t += 10;
      admission.settled(t);
    }
    expect(admission.decide()).toBeNull();
    delay = 800;
    // 300 refused: three seconds at the hundred a second measured after the step, not 60 at two.
    const waits = Array.from({ length: 300 }, () => admission.decide());
    expect(waits.at(-1)).toBe(3);
  });
});

/**
 * Device handshakes in turns (src/runtime/turns.ts), the last test below: a person's request
 * that arrives behind a burst of hub handshakes is answered after a few of them, not after all.
 *
 * A child process opens the hubs' WebSockets and an app's kept-alive HTTP connection. Once
 * every WebSocket is open, this process (the service's) holds its event loop while the child
 * sends every hub's `CONNECT` and then the app's `GET /devices`: the service finds them all
 * readable at once, the app's last, as when a fleet comes back while a person uses the app.
 * The child counts the hubs' answers that came before the app's.
 */

const HUBS = 300;

const CHILD = `
const net = require('net');
const fs = require('fs');
const WebSocket = require(process.argv[3]);
const [port, token, , marker, hubs] = process.argv.slice(1);
const app = net.connect(Number(port), '127.0.0.1');
const request = 'GET /api/v1/devices HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer ' + token + '\\r\\n\\r\\n';
let phase = 'warm', answers = 0, beforeApp = null, appText = '';
app.on('data', (d) => {
  appText += d;
  if (!/\\r\\n0\\r\\n\\r\\n$|\\}$/.test(appText)) return;
  const status = appText.slice(9, 12);
  appText = '';
  if (phase === 'warm') { phase = 'open'; openHubs(); return; }
  beforeApp = answers;
  if (status !== '200') { process.stdout.write('app answered ' + status + '\\n'); process.exit(1); }
  done();
});
app.write(request);
const sockets = [];
function openHubs() {
  let opened = 0;
  for (let i = 0; i < Number(hubs); i++) {
    const ws = new WebSocket('ws://127.0.0.1:' + port + '/socket.io/?EIO=4&transport=websocket');
    sockets.push(ws);
    ws.on('error', () => undefined);
    ws.on('message', (data) => {
      const text = data.toString();
      if (text.startsWith('0')) { if (++opened === Number(hubs)) process.stdout.write('opened\\n'); return; }
      if (text.startsWith('44/tunnel') || text.startsWith('40/tunnel')) { answers++; done(); }
    });
  }
}
process.stdin.on('data', () => {
  let sent = 0;
  for (const ws of sockets) ws.send('40/tunnel,{"token":"not-a-device-token"}', () => {
    if (++sent === sockets.length) app.write(request, () => fs.writeFileSync(marker, 'sent'));
  });
});
function done() {
  if (beforeApp === null || answers < Number(hubs)) return;
  process.stdout.write(JSON.stringify({ beforeApp, answers }) + '\\n');
  process.exit(0);
}
`;

describe('against the service', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService('embedded', { TUNNEL_HANDSHAKES_PER_SECOND: '1' });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test('past the pace a hub is refused with rate_limited and a retryAfter; an app is not', async () => {
    const owner = await createUser(service);
    const hubs = await Promise.all([registerHub(service, owner), registerHub(service, owner)]);
    const tokens = await Promise.all(hubs.map((hub) => deviceToken(service, hub, owner)));
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const first = await connect(service, tokens[0] ?? '');
    const refused = await refusal(service, { token: tokens[1] });
    expect(refused.message).toBe('rate_limited');
    expect(refused.data).toEqual({ message: 'Too many connections at once, retry later', retryAfter: 1 });
    const app = await connect(service, owner.accessToken);
    expect(app.socket.connected).toBe(true);
    first.close();
    app.close();
  });

  test('the hub client obeys it: waits the retryAfter it was given, then connects', async () => {
    const owner = await createUser(service);
    const hubs = await Promise.all([registerHub(service, owner), registerHub(service, owner)]);
    const tokens = await Promise.all(hubs.map((hub) => deviceToken(service, hub, owner)));
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const clients = hubs.map((hub, i) => new HubClient({ baseUrl: service.baseUrl, uuid: hub.uuid, tokens: { load: () => tokens[i] ?? null, save: () => undefined }, random: () => 0.5 }));
    const events: HubEvent[][] = [[], []];
    clients.forEach((client, i) => client.on((event) => events[i]?.push(event)));
    try {
      await Promise.all(clients.map((client) => client.start()));
      for (let i = 0; i < 100 && !clients.every((c) => c.connected); i++) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(clients.map((c) => c.connected)).toEqual([true, true]);
      const refusedAll = events.flat().filter((e) => e.type === 'refused');
      expect(refusedAll).toEqual([{ type: 'refused', code: 'rate_limited', retryAfter: 1 }]);
      // The wait asked for: the second given, plus a spread within the next second.
      expect(events.flat().filter((e) => e.type === 'reconnecting')).toEqual([{ type: 'reconnecting', attempt: 0, delayMs: 1500, cause: 'rate_limited' }]);
    } finally {
      for (const client of clients) client.stop();
    }
  });

  test("an app's request behind 300 hub handshakes is answered after a few of them, not after all", async () => {
    const owner = await createUser(service);
    const dir = mkdtempSync(join(tmpdir(), 'handshake-turns-'));
    const marker = join(dir, 'sent');
    const port = new URL(service.baseUrl).port;
    const child = spawn(process.execPath, ['-e', CHILD, port, owner.accessToken, require.resolve('ws'), marker, String(HUBS)], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('opened\n')) resolve();
        });
        child.once('exit', () => reject(new Error(`the child left: ${out}`)));
      });
      child.stdin.write('go\n');
      // The service's loop held until every CONNECT and the app's request are in its sockets.
      const deadline = Date.now() + 20_000;
      while (!existsSync(marker) && Date.now() < deadline) {
        /* held on purpose */
      }
      expect(existsSync(marker)).toBe(true);
      expect(await exited).toBe(0);
      const result = JSON.parse(out.split('\n').find((line) => line.startsWith('{')) ?? '{}') as { beforeApp: number; answers: number };
      expect(result.answers).toBe(HUBS);
      // Without turns every one of the 300 is answered first: they were read first.
      expect(result.beforeApp).toBeLessThan(HUBS / 3);
    } finally {
      child.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
