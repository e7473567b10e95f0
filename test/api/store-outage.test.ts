import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { DeadlineExceededError, UnavailableError } from '@eventstore/db-client';
import express from 'express';
import { MongoNetworkError, MongoNetworkTimeoutError, MongoServerError, MongoServerSelectionError } from 'mongodb';
import { errorMiddleware } from '../../src/api/http-errors';
import { WrongExpectedRevisionError } from '../../src/infra/eventstore/port';
import { isTransientStoreError } from '../../src/infra/transient';
import { createLogger } from '../../src/logger';

/**
 * A store that cannot be reached answers 503 with the §7 body, never 500, whichever route
 * meets it: the classification is `isTransientStoreError` (src/infra/transient.ts), applied
 * once by the error middleware. The errors are the drivers' own classes.
 */

const UNAVAILABLE = { statusCode: 503, message: 'Service unavailable', error: 'Service Unavailable' };

/**
 * The error the contract suite met (`MongoPoolClearedError`), built with the driver's own
 * class: it is not exported from the package's entry point.
 */
function poolClearedError(): Error {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { PoolClearedError } = require('mongodb/lib/cmap/errors') as {
    PoolClearedError: new (pool: { address: string; serverError?: Error }) => Error;
  };
  return new PoolClearedError({ address: '127.0.0.1:27017', serverError: new MongoNetworkError('Server ended moreToCome unexpectedly') });
}

function serverError(code: number, message: string): MongoServerError {
  return new MongoServerError({ ok: 0, code, errmsg: message });
}

describe('isTransientStoreError', () => {
  test('a pool cleared under an operation (MongoPoolClearedError) is transient', () => {
    const error = poolClearedError();
    expect(error.name).toBe('MongoPoolClearedError');
    expect(isTransientStoreError(error)).toBe(true);
  });

  test('the outages of each store are transient', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });
    const cases: unknown[] = [
      new MongoNetworkError('connection 3 to 127.0.0.1:27017 closed'),
      new MongoNetworkTimeoutError('connection timed out'),
      new MongoServerSelectionError('Server selection timed out after 30000 ms', { type: 'Unknown', servers: new Map(), stale: false, compatible: true, heartbeatFrequencyMS: 10_000, localThresholdMS: 15, setName: null, maxElectionId: null, maxSetVersion: null, commonWireVersion: 0, logicalSessionTimeoutMinutes: null } as never),
      serverError(91, 'The server is in quiesce mode and will shut down'),
      serverError(10107, 'not primary'),
      new UnavailableError({ code: 14, details: 'No connection established', metadata: undefined } as never),
      new DeadlineExceededError({ code: 4, details: 'Deadline exceeded', metadata: undefined } as never),
      refused,
      Object.assign(new Error('Reached the max retries per request limit (which is 1). Refer to "maxRetriesPerRequest" option for details.'), { name: 'MaxRetriesPerRequestError' }),
      new Error('Connection is closed.'),
      new Error('a read failed', { cause: new MongoNetworkError('socket hang up') }),
    ];
    expect(cases.filter((error) => !isTransientStoreError(error))).toEqual([]);
  });

  test('a fault in what was asked, or a bug, is not', () => {
    const cases: unknown[] = [
      new Error('Cannot read properties of undefined'),
      new TypeError('x is not a function'),
      serverError(11000, 'E11000 duplicate key error'),
      serverError(2, 'bad query'),
      new WrongExpectedRevisionError('device-1', 3n, 4n),
      'a string',
      null,
      undefined,
    ];
    expect(cases.filter((error) => isTransientStoreError(error))).toEqual([]);
  });

  test("the drivers' classes are told apart by their lineage, not by a name alone", () => {
    // Classification never imports the drivers (embedded mode does not load them): a class of
    // the same name from elsewhere is not the driver's.
    class TimeoutError extends Error {}
    class MongoNetworkError extends Error {}
    expect([new TimeoutError('late'), new MongoNetworkError('closed')].filter((error) => isTransientStoreError(error))).toEqual([]);
  });
});

describe('the error middleware: a store outage is 503, never 500', () => {
  let baseUrl: string;
  let close: () => Promise<void>;
  let logged = '';

  beforeAll(async () => {
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logged += chunk.toString();
        done();
      },
    });
    const app = express();
    const fail = (error: unknown): express.RequestHandler => async () => {
      await Promise.resolve();
      throw error;
    };
    app.get('/mongo', fail(new MongoNetworkError('connection 7 to 127.0.0.1:27017 closed')));
    app.get('/esdb', fail(new UnavailableError({ code: 14, details: 'No connection established', metadata: undefined } as never)));
    app.get('/redis', fail(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6390'), { code: 'ECONNREFUSED' })));
    app.get('/bug', fail(new TypeError('x is not a function')));
    app.use(errorMiddleware(createLogger('info', sink)));
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    close = () => new Promise((resolve) => server.close(() => resolve()));
  });
  afterAll(async () => {
    await close?.();
  });

  test.each(['/mongo', '/esdb', '/redis'])('%s unreachable: 503 with the §7 body, the detail in the log only', async (path) => {
    const res = await fetch(`${baseUrl}${path}`);
    expect(res.status).toBe(503);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toEqual(UNAVAILABLE);
    expect(logged).toContain('"msg":"store unavailable"');
  });

  test('anything else stays a 500 without its message', async () => {
    const res = await fetch(`${baseUrl}/bug`);
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ statusCode: 500, message: 'Internal server error', error: 'Internal Server Error' });
  });
});
