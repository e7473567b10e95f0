import { EventEmitter } from 'node:events';
import { Socket as NetSocket } from 'node:net';
import { runInNewContext } from 'node:vm';
import { releaseUpgradeResponse } from '../../src/tunnel/websocket';

/**
 * `releaseUpgradeResponse` (src/tunnel/websocket.ts) on stand-ins made here: engine.io's
 * `close` listener is found as engine.io writes it and as the bundled (minified) service has
 * it; nothing else is taken off the connection.
 */

/** A stand-in as engine.io builds one: its `close` listener on the connection, written `source`. */
function standIn(source: string): { res: EventEmitter & { req: unknown; socket: NetSocket }; connection: NetSocket } {
  const connection = new NetSocket();
  const res = Object.assign(new EventEmitter(), { req: { headers: {} } as unknown, socket: connection });
  const listener = runInNewContext(`(function () { return ${source}; })`) as (this: unknown) => () => void;
  connection.once('close', listener.call(res));
  return { res, connection };
}

describe('releaseUpgradeResponse', () => {
  test.each([['() => this.emit("close")'], ['()=>this.emit("close")']])('lets go of the request and of the stand-in listener written %s', (source) => {
    const { res, connection } = standIn(source);
    const other = (): void => undefined;
    connection.on('close', other);
    releaseUpgradeResponse(res);
    expect(res.req).toBeNull();
    expect(connection.listeners('close')).toEqual([other]);
  });

  test('takes off no other listener, however it is written', () => {
    const { res, connection } = standIn('() => this.emit("end")');
    releaseUpgradeResponse(res);
    expect(connection.listenerCount('close')).toBe(1);
  });
});
