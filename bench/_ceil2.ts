import express from 'express';
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createTokens, bearerToken } from '../src/auth/tokens';
const tokens = createTokens({ jwtAccessSecret: 'a'.repeat(40), jwtRefreshSecret: 'b'.repeat(40), jwtDeviceSecret: 'c'.repeat(40) });
const variant = process.env.V ?? 'full';
const app = express();
app.use(express.json());
app.post('/api/v1/devices/heartbeat/:uuid', (req, res) => {
  if (variant === 'full') tokens.verifyDevice(bearerToken(req.get('Authorization')));
  res.status(200).json({ success: true, device: { id: 'x', isOnline: true, lastSeenAt: new Date().toISOString() } });
});
const server = app.listen(0, '127.0.0.1', () => {
  const port = (server.address() as {port:number}).port;
  const requests = Array.from({length: 10000}, () => { const u = randomUUID(); return { path: `/api/v1/devices/heartbeat/${u}`, token: tokens.signDevice({sub: randomUUID(), deviceUuid: u, gen: 1}) }; });
  const t0 = performance.now(); for (const r of requests.slice(0, 5000)) tokens.verifyDevice(r.token); console.log('verify us', (performance.now()-t0)/5000*1000);
  const child = fork(__dirname + '/http-load.ts', [], { execArgv: ['--import', 'tsx'] });
  child.on('message', (r) => { console.log(variant, JSON.stringify(r)); process.exit(0); });
  child.send({ port, requests, body: '{"ipAddress":"192.168.1.20","metadata":{"fw":"1.4.2"}}', connections: 64, mode: 'sustained', durationMs: 5000, maxRequests: 5000000 });
});
