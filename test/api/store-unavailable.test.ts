/**
 * An embedded store that cannot write (a full disk) answers writes with 503 and the §7
 * body, and readiness is 503 naming the event store; both turn back once it can.
 */
import express from 'express';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { errorMiddleware } from '../../src/api/http-errors';
import { openEmbeddedEventStore, type EmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { createLogger } from '../../src/logger';
import type { Infrastructure } from '../../src/runtime/adapters';
import { healthRoutes } from '../../src/api/routes/health';
import { createReadiness } from '../../src/runtime/readiness';
import { newEvent, readAll } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { NO_FAULTS, SimFs } from '../sim/sim-fs';

const quiet = createLogger('silent', new Writable({ write: (_chunk, _encoding, done) => done() }));

async function fullDiskStore(): Promise<{ fs: SimFs; store: EmbeddedEventStore }> {
  const fs = new SimFs(new Rng(9));
  await fs.mkdir('/sim/data');
  const store = await openEmbeddedEventStore('/sim/data', { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined });
  await store.append('device-1', [newEvent('Registered')], 'no_stream');
  fs.faults = { ...NO_FAULTS, diskFull: true };
  await store.append('device-1', [newEvent('Heartbeat')], 0n).catch(() => undefined);
  return { fs, store };
}

/** The infrastructure readiness checks: `store` as the event store, every other part answering. */
function infrastructureOver(store: EmbeddedEventStore): Infrastructure {
  return {
    eventStore: store,
    readStore: { ping: async () => undefined },
    credentials: { ping: async () => undefined },
    redis: null,
    watermark: { current: () => ({ commit: 1n << 40n, prepare: 1n << 40n }) },
  } as unknown as Infrastructure;
}

describe('a store that cannot write', () => {
  it('answers a write with 503 and the error body, and the same write succeeds once space is back', async () => {
    const { fs, store } = await fullDiskStore();
    const app = express();
    app.post('/write', async (_req, res, next) => {
      try {
        await store.append('device-1', [newEvent('Heartbeat')], 'any');
        res.status(204).end();
      } catch (error) {
        next(error);
      }
    });
    app.use(errorMiddleware(quiet));
    const server = app.listen(0);
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/write`;
      const refused = await fetch(url, { method: 'POST' });
      expect(refused.status).toBe(503);
      expect(await refused.json()).toEqual({ statusCode: 503, message: 'Service unavailable', error: 'Service Unavailable' });
      fs.faults = { ...NO_FAULTS };
      expect((await fetch(url, { method: 'POST' })).status).toBe(204);
    } finally {
      server.close();
      await store.close();
    }
  });

  it('makes readiness 503 naming the event store, with fixed words, until it can write again', async () => {
    const { fs, store } = await fullDiskStore();
    const infra = infrastructureOver(store);
    const readiness = createReadiness(infra, { lag: () => ({ events: 0, ms: 0 }) }, quiet);

    const down = await readiness();
    expect(down.ready).toBe(false);
    expect(down.checks.eventStore).toEqual({ status: 'failed' });

    fs.faults = { ...NO_FAULTS };
    const up = await readiness();
    expect(up.checks.eventStore).toEqual({ status: 'ok' });
    expect(up.ready).toBe(true);
    await store.close();
  });
});

describe('a start on a full disk', () => {
  /** A log written while the disk had space, reopened once it is full. */
  async function startedOnFullDisk(): Promise<{ fs: SimFs; store: EmbeddedEventStore; messages: string[] }> {
    const fs = new SimFs(new Rng(10));
    await fs.mkdir('/sim/data');
    const options = { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0 };
    const first = await openEmbeddedEventStore('/sim/data', { ...options, log: () => undefined });
    await first.append('device-1', [newEvent('Registered', { name: 'Hub' })], 'no_stream');
    await first.close();
    fs.processExit();
    fs.faults = { ...NO_FAULTS, diskFull: true };
    const messages: string[] = [];
    return { fs, store: await openEmbeddedEventStore('/sim/data', { ...options, log: (message) => messages.push(message) }), messages };
  }

  it('opens read-only and says so from the start: readiness 503 naming the event store, reads served, writes 503; then resumes by itself', async () => {
    const { fs, store, messages } = await startedOnFullDisk();
    const infra = infrastructureOver(store);
    const app = express();
    app.use(healthRoutes({ readiness: createReadiness(infra, { lag: () => ({ events: 0, ms: 0 }) }, quiet) }));
    app.get('/read', async (_req, res, next) => {
      try {
        res.json((await readAll(store.readStream('device-1'))).map((event) => event.data));
      } catch (error) {
        next(error);
      }
    });
    app.post('/write', async (_req, res, next) => {
      try {
        await store.append('device-1', [newEvent('Renamed', { name: 'Hub 2' })], 'any');
        res.status(204).end();
      } catch (error) {
        next(error);
      }
    });
    app.use(errorMiddleware(quiet));
    const server = app.listen(0);
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      expect(messages.some((message) => message.startsWith('Event log: opened read-only (ENOSPC'))).toBe(true);
      const down = await fetch(`${url}/health/ready`);
      expect(down.status).toBe(503);
      expect(await down.json()).toEqual({
        status: 'unavailable',
        checks: { eventStore: { status: 'failed' }, readStore: { status: 'ok' }, credentials: { status: 'ok' }, projector: { status: 'ok' } },
      });
      const read = await fetch(`${url}/read`);
      expect({ status: read.status, body: await read.json() }).toEqual({ status: 200, body: [{ name: 'Hub' }] });
      const refused = await fetch(`${url}/write`, { method: 'POST' });
      expect({ status: refused.status, body: await refused.json() }).toEqual({
        status: 503,
        body: { statusCode: 503, message: 'Service unavailable', error: 'Service Unavailable' },
      });

      fs.faults = { ...NO_FAULTS };
      expect((await fetch(`${url}/health/ready`)).status).toBe(200);
      expect((await fetch(`${url}/write`, { method: 'POST' })).status).toBe(204);
      expect(await (await fetch(`${url}/read`)).json()).toEqual([{ name: 'Hub' }, { name: 'Hub 2' }]);
    } finally {
      server.close();
      await store.close();
    }
  });
});
