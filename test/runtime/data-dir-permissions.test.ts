import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { writeStartSnapshot } from '../../src/runtime/snapshot';
import { startServerProcess } from '../support/server';
import { HISTORY_START, RETENTION_SECONDS, writeHeartbeatHistory } from '../infra/fixtures/heartbeat-history';

/**
 * DATA_DIR holds personal data: the directory is 0700 and every file in it 0600 (decisions §1),
 * whatever the umask, and a directory left by an earlier version (0755, files 0644) is
 * tightened at start.
 */

let parent: string;
let dataDir: string;
beforeEach(() => {
  parent = mkdtempSync(join(tmpdir(), 'hhc-perms-'));
  dataDir = join(parent, 'data');
  // As an earlier version left it: a 0755 directory with a 0644 file.
  mkdirSync(dataDir);
  chmodSync(dataDir, 0o755);
  writeFileSync(join(dataDir, 'left-by-an-earlier-version.json'), '{}');
  chmodSync(join(dataDir, 'left-by-an-earlier-version.json'), 0o644);
});
afterEach(() => rmSync(parent, { recursive: true, force: true }));

/** The mode of the directory and of every file in it, e.g. `{ '.': '700', 'events.log': '600' }`. */
function modes(): Record<string, string> {
  const result: Record<string, string> = { '.': (statSync(dataDir).mode & 0o777).toString(8) };
  for (const name of readdirSync(dataDir)) result[name] = (statSync(join(dataDir, name)).mode & 0o777).toString(8);
  return result;
}

function expectOwnerOnly(found: Record<string, string>): void {
  expect(Object.entries(found).filter(([name, mode]) => mode !== (name === '.' ? '700' : '600'))).toEqual([]);
}

test('the event log, its segments, indexes, compacted segments, the lock, the snapshot and the credentials are created owner-only under umask 022', async () => {
  const umask = process.umask(0o022);
  try {
    const clock = { now: HISTORY_START };
    const options = { now: () => clock.now, segmentBytes: 4096, reclaimIntervalMs: 0, log: () => undefined };
    const store = await openEmbeddedEventStore(dataDir, options);
    await writeHeartbeatHistory(store, clock);
    clock.now += RETENTION_SECONDS * 2 * 1000;
    const reclaimed = await store.reclaimExpired();
    await store.close();
    const credentials = await openFileCredentialStore(dataDir);
    await credentials.close();
    await writeStartSnapshot(join(dataDir, 'read-models.snapshot'), 'v', { readModels: { checkpoints: {}, collections: {} } });

    const found = modes();
    // What was made: several segments and their indexes, compacted ones among them.
    expect(reclaimed.segmentsCompacted).toBeGreaterThan(0);
    expect(Object.keys(found).filter((name) => /^events-\d+\.log$/.test(name)).length).toBeGreaterThan(2);
    expect(Object.keys(found).filter((name) => name.endsWith('.idx')).length).toBeGreaterThan(2);
    expectOwnerOnly(found);
    expect(Object.keys(found)).toEqual(expect.arrayContaining(['events.log', 'events.lock', 'credentials.jsonl', 'read-models.snapshot', 'left-by-an-earlier-version.json']));
  } finally {
    process.umask(umask);
  }
}, 60_000);

test('the service started under umask 022 on a 0755 directory with a 0644 file leaves the directory 0700 and every file 0600', async () => {
  const service = await startServerProcess({ DATA_DIR: dataDir }, 60_000, ['sh', '-c', 'umask 022 && exec "$0" "$@"']);
  try {
    const { internalApiKeys } = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as { internalApiKeys: string[] };
    const synced = await fetch(`${service.baseUrl}/api/v1/auth/sync-customer`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Internal-Api-Key': internalApiKeys[0] ?? '' },
      body: JSON.stringify({ id: 1, first_name: 'Ada', last_name: 'Lovelace', email: 'ada@example.com', active: true }),
    });
    expect(synced.status).toBe(201);
  } finally {
    expect(await service.stop()).toBe(0);
  }

  const found = modes();
  // The stop wrote a start snapshot and the active segment's index.
  expectOwnerOnly(found);
  expect(Object.keys(found)).toEqual(
    expect.arrayContaining(['events.log', 'events.log.idx', 'events.lock', 'secrets.json', 'credentials.jsonl', 'read-models.snapshot', 'left-by-an-earlier-version.json']),
  );
}, 120_000);
