import { addDeviceSession, createSessions, deviceSessionsOf, removeDeviceSession, type DeviceSession } from '../../src/tunnel/context';

/**
 * The index of device sockets by device (src/tunnel/context.ts): the session itself while it
 * is the device's only one (what every idle hub is), a Set while several overlap (a hub
 * reconnecting before its old socket is gone).
 */

const session = (uuid: string, n: number): DeviceSession => ({ uuid, n }) as unknown as DeviceSession;

describe('the device sockets of a device', () => {
  test('one socket is kept as itself; overlapping ones are all found; back to itself when alone again', () => {
    const sessions = createSessions();
    const first = session('a', 1);
    const second = session('a', 2);
    const other = session('b', 3);

    addDeviceSession(sessions, first);
    addDeviceSession(sessions, first);
    addDeviceSession(sessions, other);
    expect(sessions.devices.get('a')).toBe(first);
    expect(deviceSessionsOf(sessions, 'a')).toEqual([first]);

    addDeviceSession(sessions, second);
    expect(deviceSessionsOf(sessions, 'a')).toEqual([first, second]);

    removeDeviceSession(sessions, first);
    expect(sessions.devices.get('a')).toBe(second);
    expect(deviceSessionsOf(sessions, 'a')).toEqual([second]);

    // A session that is not (or no longer) indexed changes nothing.
    removeDeviceSession(sessions, first);
    expect(deviceSessionsOf(sessions, 'a')).toEqual([second]);

    removeDeviceSession(sessions, second);
    expect(sessions.devices.has('a')).toBe(false);
    expect(deviceSessionsOf(sessions, 'a')).toEqual([]);
    expect(deviceSessionsOf(sessions, 'b')).toEqual([other]);
  });

  test('three overlapping: removing them in any order leaves the others', () => {
    const sessions = createSessions();
    const [x, y, z] = [1, 2, 3].map((n) => session('a', n)) as [DeviceSession, DeviceSession, DeviceSession];
    for (const s of [x, y, z]) addDeviceSession(sessions, s);
    removeDeviceSession(sessions, y);
    expect(deviceSessionsOf(sessions, 'a')).toEqual([x, z]);
    removeDeviceSession(sessions, z);
    expect(sessions.devices.get('a')).toBe(x);
  });
});
