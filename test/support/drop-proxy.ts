import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP relay in front of a service, to cut every connection at once (a network drop) and to
 * refuse new ones for a while (a service that is down), without touching the service.
 */
export interface TcpProxy {
  readonly baseUrl: string;
  /** Destroys every open connection. */
  drop(): void;
  /** While down, new connections are closed at once. */
  setDown(down: boolean): void;
  /** Connections accepted so far. */
  readonly accepted: () => number;
  close(): Promise<void>;
}

export async function startTcpProxy(target: string): Promise<TcpProxy> {
  const { hostname, port } = new URL(target);
  const open = new Set<Socket>();
  let down = false;
  let accepted = 0;
  const server: Server = createServer((client) => {
    if (down) {
      client.destroy();
      return;
    }
    accepted++;
    const upstream = connect(Number(port), hostname);
    open.add(client);
    open.add(upstream);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    drop: () => {
      for (const socket of [...open]) socket.destroy();
      open.clear();
    },
    setDown: (value) => {
      down = value;
    },
    accepted: () => accepted,
    close: async () => {
      for (const socket of [...open]) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
