import { execFileSync } from 'node:child_process';
import type { DeviceStatus, MessageAck } from '../../src/tunnel/events';
import { processPair } from '../support/process-pair';
import { request } from '../support/tunnel';

/**
 * Faults of one process, made from outside against a real stack: process `a` in this test
 * (the app's side), process `b` a child (the hub's side).
 */

const pair = processPair({
  startTimeoutMs: 180_000,
  // A stalled process must be let go on before it can stop.
  beforeStop: (b) => {
    const pid = listener(b.port);
    if (pid !== null) process.kill(pid, 'SIGCONT');
  },
});
const on = pair.on;

/** The pid of the process listening on `port` (the service child). */
function listener(port: number): number | null {
  const out = execFileSync('ss', ['-ltnHp', `sport = :${port}`]).toString();
  const match = /pid=(\d+)/.exec(out);
  return match === null ? null : Number(match[1]);
}

/** The status a client keeps when it orders statuses by `tunnelSeq` (a later one never loses). */
const newest = (statuses: readonly DeviceStatus[]): DeviceStatus | undefined =>
  statuses.reduce<DeviceStatus | undefined>((best, s) => (best === undefined || s.tunnelSeq > best.tunnelSeq ? s : best), undefined);

test('a hub process taken for dead that comes back: its "connected" again is ordered after the "gone" the others sent', async () => {
  const b = pair.b();
  const { hub, token, app } = await pair.watchedHub();
  const hubSocket = await on(b, token);
  await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected, 10_000);

  // The hub's process stalls (a long GC pause, a frozen VM) for longer than its liveness key lives.
  const pid = listener(b.port);
  if (pid === null) throw new Error('no pid for process b');
  process.kill(pid, 'SIGSTOP');
  let down: DeviceStatus;
  try {
    down = await app.next<DeviceStatus>('device:status', (s) => !s.tunnelConnected, 30_000);
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  expect(down.tunnelConnected).toBe(false);

  // It resumes: the hub's socket never dropped, and the process finds itself taken for dead
  // and tells the subscribers again (devices.announceHeld).
  const again = await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected, 30_000);
  expect(again.tunnelConnected).toBe(true);
  expect(hubSocket.socket.connected).toBe(true);
  // The hub is reachable once more (acks delivered: true) ...
  const deadline = Date.now() + 30_000;
  let ack: MessageAck = { success: false, delivered: false };
  while (!ack.delivered && Date.now() < deadline) {
    ack = await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 1 });
    if (!ack.delivered) await new Promise((r) => setTimeout(r, 500));
  }
  expect(ack).toEqual({ success: true, delivered: true });
  // ... so a client that keeps the status with the greatest tunnelSeq must read it connected.
  const statuses = app.all<DeviceStatus>('device:status');
  expect({ newest: newest(statuses), all: statuses }).toMatchObject({ newest: { tunnelConnected: true } });
}, 150_000);

test('a hub that reconnects to the surviving process the moment its old process dies is never read as gone afterwards', async () => {
  const a = pair.a();
  const b = pair.b();
  const { hub, token, app } = await pair.watchedHub();
  await on(b, token);
  const up = await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected, 10_000);

  // Killed with SIGKILL, and the hub is back on `a` at once: before `a` can find `b` dead.
  await b.kill();
  await on(a, token);
  const again = await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected && s.tunnelSeq > up.tunnelSeq, 10_000);
  // Past the time `a` takes to find `b` dead (liveness key 12 s, sweep every 2 s, within 30 s in all):
  // whatever `a` said meanwhile, the newest status says connected and the hub is reachable.
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 1 })).toEqual({ success: true, delivered: true });
    await new Promise((r) => setTimeout(r, 1000));
  }
  const statuses = app.all<DeviceStatus>('device:status');
  expect({ newest: newest(statuses), all: statuses }).toMatchObject({ newest: { tunnelConnected: true, tunnelSeq: again.tunnelSeq } });
}, 150_000);
