import { MongoClient } from 'mongodb';
import { startJongodb, withPollingMonitor, type Jongodb } from '../support/jongodb';

/**
 * The MongoDB stand-in and the driver's server monitoring. jongodb does not speak the
 * streaming protocol (an awaitable `hello` answered with `moreToCome`): with the driver's
 * default, its monitor failed about once a second with "Server ended moreToCome
 * unexpectedly" and cleared the connection pool, failing whatever waited for a connection
 * (`MongoPoolClearedError`). The URI the stand-in hands out asks for polling.
 */

let jongodb: Jongodb;

beforeAll(async () => {
  jongodb = await startJongodb();
}, 30_000);
afterAll(async () => {
  await jongodb?.stop();
});

test('the URI of the stand-in asks for polling monitoring, once', () => {
  expect(jongodb.uri).toMatch(/[?&]serverMonitoringMode=poll(&|$)/);
  expect(withPollingMonitor('mongodb://h:1/db')).toBe('mongodb://h:1/db?serverMonitoringMode=poll');
  expect(withPollingMonitor('mongodb://h:1/db?replicaSet=rs0')).toBe('mongodb://h:1/db?replicaSet=rs0&serverMonitoringMode=poll');
  expect(withPollingMonitor(jongodb.uri)).toBe(jongodb.uri);
});

test('a client of the stand-in keeps its pool through many heartbeats under concurrent operations', async () => {
  // The shortest heartbeat the driver allows, so a handful of them pass in a few seconds.
  const client = new MongoClient(jongodb.uri, { heartbeatFrequencyMS: 500 });
  const failures: string[] = [];
  const awaited: boolean[] = [];
  let cleared = 0;
  client.on('serverHeartbeatFailed', (event) => failures.push(event.failure.message));
  client.on('serverHeartbeatSucceeded', (event) => awaited.push(event.awaited));
  client.on('connectionPoolCleared', () => (cleared += 1));
  await client.connect();
  try {
    const collection = client.db('monitoring').collection<{ _id: string; n: number }>('probe');
    const errors: string[] = [];
    let running = true;
    let operations = 0;
    const worker = async (w: number): Promise<void> => {
      while (running) {
        try {
          await collection.updateOne({ _id: `w${w}` }, { $inc: { n: 1 } }, { upsert: true });
          await collection.findOne({ _id: `w${w}` });
          operations += 2;
        } catch (error) {
          errors.push(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
        }
      }
    };
    const workers = Array.from({ length: 8 }, (_, w) => worker(w));
    // Until six heartbeats have come back (or failed): about three seconds of polling.
    while (awaited.length + failures.length < 6) await new Promise((resolve) => setTimeout(resolve, 50));
    running = false;
    await Promise.all(workers);

    expect(failures).toEqual([]);
    expect(cleared).toBe(0);
    expect(errors).toEqual([]);
    expect(awaited.every((a) => !a)).toBe(true);
    expect(operations).toBeGreaterThan(0);
  } finally {
    await client.close();
  }
}, 30_000);
