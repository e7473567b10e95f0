import { createServer, connect, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a stand-in, for outages that lose nothing: `cut()`
 * drops every connection and refuses new ones (the port is closed), `resume()` listens on
 * the same port again. The server behind it keeps its data, as a real one that was
 * unreachable for a while would.
 */
export interface TcpProxy {
  readonly port: number;
  cut(): Promise<void>;
  resume(): Promise<void>;
  stop(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  const track = (socket: Socket): void => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const onConnection = (client: Socket): void => {
    const upstream = connect(targetPort, targetHost);
    track(client);
    track(upstream);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
  };
  const listen = (server: Server, port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        const address = server.address();
        resolve(typeof address === 'object' && address !== null ? address.port : port);
      });
    });
  const close = (server: Server): Promise<void> => new Promise((resolve) => server.close(() => resolve()));

  let server: Server | null = createServer(onConnection);
  const port = await listen(server, 0);
  const cut = async (): Promise<void> => {
    const closing = server === null ? Promise.resolve() : close(server);
    server = null;
    for (const socket of sockets) socket.destroy();
    await closing;
  };
  return {
    port,
    cut,
    resume: async () => {
      if (server !== null) return;
      const next = createServer(onConnection);
      await listen(next, port);
      server = next;
    },
    stop: cut,
  };
}
