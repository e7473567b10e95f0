import { api, createUser, type TestService } from '../support/harness';
import { deviceToken, heartbeat, registerHub } from '../support/tunnel';
import { twoProcesses } from '../support/two-processes';
import type { TunnelError } from '../../src/tunnel/events';

/**
 * A device token revoked through one API process is refused by the others before anything
 * is written: the heartbeat path checks tokens against the process's fold of the device
 * stream, and every process's live feed drops that fold when the device's token generation
 * changes or the device is deleted (decisions §4: 401 `Token has been revoked`).
 */

const REVOKED = { statusCode: 401, message: 'Token has been revoked', error: 'Unauthorized' };

interface HistoryPage {
  readonly data: ReadonlyArray<{ readonly type: string }>;
}

describe('device tokens revoked on another process (distributed mode, two API processes)', () => {
  const { a, b, on } = twoProcesses();

  const heartbeatsOf = async (service: TestService, uuid: string, token: string): Promise<number> => {
    const res = await api(service, 'GET', `/devices/${uuid}/history?include=heartbeats&limit=100`, { token });
    expect(res.status).toBe(200);
    return (res.body as HistoryPage).data.filter((e) => e.type === 'HeartbeatReceived').length;
  };

  test.each(['a newer token', 'a deletion'] as const)('after %s through one process, the other refuses the old token without recording a heartbeat', async (how) => {
    const owner = await createUser(a());
    const hub = await registerHub(a(), owner);
    const oldToken = await deviceToken(a(), hub, owner);
    // Process b folds the device stream and holds the hub's tunnel socket.
    await heartbeat(b(), hub, oldToken);
    await heartbeat(b(), hub, oldToken);
    const hubSocket = await on(b(), oldToken);
    const recorded = await heartbeatsOf(a(), hub.uuid, owner.accessToken);
    expect(recorded).toBe(2);

    if (how === 'a newer token') await deviceToken(a(), hub, owner);
    else expect((await api(a(), 'DELETE', `/devices/${hub.uuid}`, { token: owner.accessToken })).status).toBe(200);
    // b's live feed has seen it once its socket of the old token is told so.
    expect((await hubSocket.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).code).toBe('ACCESS_REVOKED');

    const refused = await api(b(), 'POST', `/devices/heartbeat/${hub.uuid}`, { token: oldToken, body: {} });
    expect({ status: refused.status, body: refused.body }).toEqual({ status: 401, body: REVOKED });
    if (how === 'a newer token') expect(await heartbeatsOf(a(), hub.uuid, owner.accessToken)).toBe(recorded);
  });
});
