import { deviceDecider, offlineDeadline, type DeviceCommand, type DeviceEvent } from '../../src/domain/device';
import { spec } from '../support/decider-spec';

/** Presence rules of the device decider: ConfirmPresence, and the deadline the expiry job waits for. */

const uuid = '3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b';
const device = spec(deviceDecider);

const registered = (at: string): DeviceEvent => ({
  type: 'DeviceRegistered',
  data: { id: 'internal-1', uuid, deviceId: 'HUB-1', name: 'Hub', ipAddress: null, port: '8123', metadata: null, gen: 0, registeredAt: at },
});
const wentOnline = (lastSeenAt: string): DeviceEvent => ({ type: 'DeviceWentOnline', data: { uuid, lastSeenAt } });
const wentOffline = (lastSeenAt: string, at: string): DeviceEvent => ({
  type: 'DeviceWentOffline',
  data: { uuid, reason: 'heartbeat-timeout', lastSeenAt, wentOfflineAt: at },
});
const deleted = (at: string): DeviceEvent => ({ type: 'DeviceDeleted', data: { uuid, id: 'internal-1', deletedAt: at } });
const confirm = (heartbeatAt: string, now = '2026-11-21T12:10:00.000Z'): DeviceCommand => ({
  type: 'ConfirmPresence',
  data: { uuid, heartbeatAt, now },
});

const REGISTERED = '2026-11-21T11:00:00.000Z';
const HEARD = '2026-11-21T12:00:00.000Z';
const EXPIRED = '2026-11-21T12:05:00.000Z';
const offline = [registered(REGISTERED), wentOnline(HEARD), wentOffline(HEARD, EXPIRED)];

describe('ConfirmPresence', () => {
  it('brings a device that went offline back online for a heartbeat newer than the one it went offline with', () => {
    device.given(offline).when(confirm('2026-11-21T12:04:59.999Z')).then([wentOnline('2026-11-21T12:04:59.999Z')]);
  });

  it('does nothing for the heartbeat the offline transition already counted, or an older one', () => {
    device.given(offline).when(confirm(HEARD)).thenNothing();
    device.given(offline).when(confirm('2026-11-21T11:59:00.000Z')).thenNothing();
  });

  it('does nothing for an online, deleted or unknown device, or for a heartbeat of an earlier registration', () => {
    device.given([registered(REGISTERED), wentOnline(HEARD)]).when(confirm(EXPIRED)).thenNothing();
    device.given([...offline, deleted(EXPIRED)]).when(confirm('2026-11-21T12:06:00.000Z')).thenNothing();
    device.given([]).when(confirm(EXPIRED)).thenNothing();
    device.given([registered(REGISTERED)]).when(confirm('2026-11-21T10:59:00.000Z')).thenNothing();
  });
});

describe('offlineDeadline', () => {
  const online = device.given([registered(REGISTERED), wentOnline(HEARD)]).when(confirm(HEARD)).result().state;

  it('is the newest heartbeat known plus the window, to the millisecond', () => {
    expect(offlineDeadline(online, null, 300)).toBe('2026-11-21T12:05:00.000Z');
    expect(offlineDeadline(online, '2026-11-21T12:01:30.250Z', 2)).toBe('2026-11-21T12:01:32.250Z');
    // An older heartbeat than the transition's own never pulls the deadline earlier.
    expect(offlineDeadline(online, '2026-11-21T11:00:00.000Z', 300)).toBe('2026-11-21T12:05:00.000Z');
  });

  it('is null when the device is not online', () => {
    const state = device.given(offline).when(confirm(HEARD)).result().state;
    expect(offlineDeadline(state, '2026-11-21T12:30:00.000Z', 300)).toBeNull();
  });
});
