import type { Express } from 'express';

/** A bench's own HTTP server on 127.0.0.1, on a free port. */
export interface LoopbackServer {
  readonly port: number;
  close(): Promise<void>;
}

export async function listenOnLoopback(app: Express): Promise<LoopbackServer> {
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  const address = server.address();
  return {
    port: typeof address === 'object' && address !== null ? address.port : 0,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
