import { once } from 'node:events';
import { createRequire } from 'node:module';
import { connect, type Socket } from 'node:net';
import { guardClosedConnections } from '../../src/infra/mongo-driver-guard';
import { startJongodb, type Jongodb } from '../support/jongodb';

/**
 * The MongoDB driver's Connection, as the server monitor and the pools use it, on a real socket
 * to a MongoDB-wire server: a command sent just before its socket is destroyed (a reset, a drop)
 * never settles in the driver as shipped; with the guard it fails with a network error, which
 * the driver then handles as any other (src/infra/mongo-driver-guard.ts).
 */

interface Connection {
  readonly closed: boolean;
  command(ns: unknown, command: Record<string, unknown>, options: Record<string, unknown>): Promise<unknown>;
  exhaustCommand(ns: unknown, command: Record<string, unknown>, options: Record<string, unknown>, listener: (error?: Error, reply?: unknown) => void): void;
}

const load = createRequire(__filename);
const { Connection } = load('mongodb/lib/cmap/connection') as { Connection: new (socket: Socket, options: { id: number; generation: number }) => Connection };
const { ns } = load('mongodb/lib/utils') as { ns: (namespace: string) => unknown };
const ADMIN = ns('admin.$cmd');

let jongodb: Jongodb;
const sockets: Socket[] = [];
beforeAll(async () => {
  jongodb = await startJongodb({ replicaSet: false });
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await jongodb.stop();
});

async function openConnection(): Promise<{ connection: Connection; socket: Socket }> {
  const socket = connect(Number(new URL(jongodb.uri).port), '127.0.0.1');
  sockets.push(socket);
  await once(socket, 'connect');
  const connection = new Connection(socket, { id: sockets.length, generation: 0 });
  expect(await connection.command(ADMIN, { ping: 1 }, {})).toMatchObject({ ok: 1 });
  return { connection, socket };
}

/** How a promise ends within `ms`: resolved, rejected (with its message), or still pending. */
function outcome(promise: Promise<unknown>, ms: number): Promise<string> {
  return Promise.race([
    promise.then(
      () => 'resolved',
      (error: unknown) => `rejected: ${error instanceof Error ? error.message : String(error)}`,
    ),
    new Promise<string>((resolve) => setTimeout(() => resolve('pending'), ms).unref()),
  ]);
}

test('the driver as shipped: a command whose socket is destroyed right after the call never settles', async () => {
  // Runs before the guard is installed (jest gives this file its own copy of the driver). Should
  // a later driver settle it, this fails, and the guard can go.
  const { connection, socket } = await openConnection();
  const pending = connection.command(ADMIN, { ping: 1 }, {});
  pending.catch(() => undefined);
  socket.destroy();
  expect(await outcome(pending, 2000)).toBe('pending');
  expect(connection.closed).toBe(true);
});

describe('with the guard', () => {
  beforeAll(() => {
    guardClosedConnections();
    guardClosedConnections(); // installing it twice changes nothing
  });

  test('the same command fails with the connection closed, at once', async () => {
    const { connection, socket } = await openConnection();
    const pending = connection.command(ADMIN, { ping: 1 }, {});
    socket.destroy();
    expect(await outcome(pending, 2000)).toMatch(/^rejected: connection \d+ to .* closed$/);
  });

  test('a command on a connection closed already fails at once; a healthy one still answers', async () => {
    const healthy = await openConnection();
    expect(await healthy.connection.command(ADMIN, { ping: 1 }, {})).toMatchObject({ ok: 1 });
    const { connection, socket } = await openConnection();
    socket.destroy();
    const deadline = Date.now() + 2000;
    while (!connection.closed && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(connection.closed).toBe(true);
    expect(await outcome(connection.command(ADMIN, { ping: 1 }, {}), 2000)).toMatch(/^rejected: /);
  });

  test('a streaming (exhaust) command ends with an error when its socket is destroyed, and only once', async () => {
    const { connection, socket } = await openConnection();
    const errors: Error[] = [];
    connection.exhaustCommand(ADMIN, { ping: 1 }, {}, (error) => {
      if (error !== undefined) errors.push(error);
    });
    socket.destroy();
    const deadline = Date.now() + 2000;
    while (errors.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toMatch(/closed/);
  });
});
