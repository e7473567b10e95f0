import { createSessions, type Session, type TunnelSessions } from '../../src/tunnel/context';
import { startExpirySweep } from '../../src/tunnel/expiry';

/**
 * Token expiry with one sweep for every socket (src/tunnel/expiry.ts): a socket whose token
 * expired gets TOKEN_EXPIRED and is disconnected at the first sweep from its expiry on, never
 * before; a session without expiry is never cut; a later session that expires sooner than
 * every known one is still cut in time.
 */

interface FakeSocket {
  readonly id: string;
  readonly emitted: Array<[string, unknown]>;
  disconnected: boolean;
}

function session(sessions: TunnelSessions, id: string, expiresAt: number): { session: Session; socket: FakeSocket } {
  const socket: FakeSocket = { id, emitted: [], disconnected: false };
  const fake = {
    socket: {
      id,
      emit: (event: string, payload: unknown) => socket.emitted.push([event, payload]),
      // What Socket.IO does on disconnect: the tunnel's `left` takes the session out.
      disconnect: () => {
        socket.disconnected = true;
        sessions.all.delete(id);
      },
    },
    expiresAt,
  } as unknown as Session;
  sessions.all.set(id, fake);
  return { session: fake, socket };
}

test('sockets are cut at the first sweep once their token expired, and not before', () => {
  let now = 1_000_000;
  const sessions = createSessions();
  const sweep = startExpirySweep({ sessions }, { now: () => new Date(now) }, 60_000);
  try {
    const a = session(sessions, 'a', now + 6_000);
    const never = session(sessions, 'never', 0);
    sweep.track(a.session);
    sweep.track(never.session);

    now += 4_999;
    sweep.sweep();
    expect(a.socket.disconnected).toBe(false);

    // A session that came later and expires sooner than every other.
    const b = session(sessions, 'b', now + 500);
    sweep.track(b.session);
    now += 500;
    sweep.sweep();
    expect(b.socket).toMatchObject({ disconnected: true, emitted: [['tunnel:error', { code: 'TOKEN_EXPIRED', message: expect.any(String) }]] });
    expect(a.socket.disconnected).toBe(false);

    now += 500;
    sweep.sweep();
    expect(a.socket.disconnected).toBe(false);
    now += 1;
    sweep.sweep();
    expect(a.socket).toMatchObject({ disconnected: true, emitted: [['tunnel:error', { code: 'TOKEN_EXPIRED', message: expect.any(String) }]] });

    now += 10 * 365 * 86_400_000;
    sweep.sweep();
    expect(never.socket).toEqual({ id: 'never', emitted: [], disconnected: false });
    expect([...sessions.all.keys()]).toEqual(['never']);
  } finally {
    sweep.stop();
  }
});
