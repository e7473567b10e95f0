import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server, type ServerOptions } from 'socket.io';
import { TunnelEngine } from '../../src/tunnel/engine';

/** A Socket.IO server on the tunnel's engine (src/tunnel/engine.ts), on port 0 of 127.0.0.1. */
export interface EngineServer {
  readonly http: HttpServer;
  readonly io: Server;
  readonly engine: TunnelEngine;
  readonly url: string;
}

export async function startEngineServer(options: Partial<ServerOptions>): Promise<EngineServer> {
  const http = createServer();
  const io = new Server(options);
  const engine = new TunnelEngine(options);
  engine.attach(http, options);
  io.bind(engine);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return { http, io, engine, url: `http://127.0.0.1:${(http.address() as AddressInfo).port}` };
}

/** The engine closed, every connection the HTTP server still holds cut, the server closed. */
export async function stopEngineServer(server: EngineServer): Promise<void> {
  server.engine.close();
  server.http.closeAllConnections();
  await new Promise<void>((resolve) => server.http.close(() => resolve()));
}
