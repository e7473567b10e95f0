import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEVICE_SNAPSHOT_EVENT, DEVICE_SNAPSHOT_EVERY, deviceSnapshotStream } from '../../src/commands/snapshots';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import type { EventStore } from '../../src/infra/eventstore/port';
import { SNAPSHOT_FILE_NAME } from '../../src/runtime/snapshot';
import { api, CRM_KEY, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { runReplay } from '../support/replay';
import { snapshotReadModels } from '../support/snapshot';
import { filesUnder, foundIn } from '../support/data-dir-bytes';

/**
 * Device snapshots through the whole service, in both modes: a household's hub with a long
 * history (so its stream has snapshots) and a revoked device token; then its only owner is
 * erased through the CRM. Looked at from outside: the bytes the service keeps, every read path
 * (the snapshot stream through the service's own store, the audit endpoints, the export, the
 * rebuild, `npm run replay`), and a cold fold in a process that did not write them (embedded: a
 * restart with and without the start snapshot; distributed: another API process), which must
 * refuse the revoked token and accept the current one exactly as the whole stream does.
 */

const ERASED = '[erased]';

async function readAll(store: EventStore, stream: string): Promise<Array<{ type: string; data: Record<string, unknown> }>> {
  const events: Array<{ type: string; data: Record<string, unknown> }> = [];
  for await (const event of store.readStream(stream)) events.push({ type: event.type, data: event.data as Record<string, unknown> });
  return events;
}

async function esdbText(url: string): Promise<string> {
  const store = createEsdbEventStore(url);
  let text = '';
  const subscription = store.subscribe();
  try {
    for await (const item of subscription) {
      if (item.kind === 'caught-up') break;
      text += JSON.stringify({ s: item.event.streamName, d: item.event.data, m: item.event.metadata });
    }
  } finally {
    await subscription.close();
    await store.close();
  }
  return text;
}

interface Hub {
  readonly uuid: string;
  readonly current: string;
  readonly revoked: string;
}

/** A hub with a long history: a first token (revoked by a second), and many heartbeats that each report a new address. */
async function agedHub(service: TestService, ownerToken: string, name: string, metadata: string, ipOf: (i: number) => string, beats: number): Promise<Hub> {
  const uuid = randomUUID();
  expect((await api(service, 'POST', '/devices/register', { token: ownerToken, body: { uuid, deviceId: 'HUB-SNAP', name, ipAddress: ipOf(0), metadata: { plan: metadata } } })).status).toBe(201);
  const revoked = ((await api(service, 'POST', `/devices/auth/${uuid}`, { token: ownerToken })).body as { token: string }).token;
  const current = ((await api(service, 'POST', `/devices/auth/${uuid}`, { token: ownerToken })).body as { token: string }).token;
  for (let i = 1; i <= beats; i++) {
    expect((await api(service, 'POST', `/devices/heartbeat/${uuid}`, { token: current, body: { ipAddress: ipOf(i), metadata: { plan: metadata, i } } })).status).toBe(200);
  }
  return { uuid, current, revoked };
}

async function expectTokens(service: TestService, hub: Hub): Promise<void> {
  expect(await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hub.revoked, body: {} })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
  expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hub.current, body: {} })).status).toBe(200);
}

describe.each<Mode>(MODES)('device snapshots through the service (%s mode)', (mode) => {
  const dataDir = mode === 'embedded' ? mkdtempSync(join(tmpdir(), 'hhc-review-snap-svc-')) : null;
  let service: TestService;
  const stopped: TestService[] = [];
  afterAll(async () => {
    for (const s of stopped) await s.stop().catch(() => undefined);
    if (dataDir !== null) rmSync(dataDir, { recursive: true, force: true });
  });

  test('erasure leaves no readable copy in any snapshot; no read path shows snapshots; a cold fold elsewhere decides as the whole stream', async () => {
    service = await startTestService(mode, dataDir !== null ? { DATA_DIR: dataDir } : {});
    stopped.push(service);
    const tag = randomUUID().slice(0, 8);
    const ida = { name: `Ida snapshot attic ${tag}`, plan: `ida-snapshot-plan-${tag}`, ip: (i: number) => `10.${Number.parseInt(tag.slice(0, 2), 16) % 200}.91.${i}` };
    const beats = 2 * DEVICE_SNAPSHOT_EVERY + 3;
    const secrets = [ida.name, ida.plan, ...Array.from({ length: beats + 1 }, (_, i) => ida.ip(i))];

    // The person, from the CRM (erased through it later); another household, an admin, with an aged hub of its own.
    const syncId = 800_000 + Math.floor(Math.random() * 100_000);
    const synced = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: 'Ida', last_name: 'Snapshot', email: `ida.snapshot.${tag}@example.net`, active: true },
    });
    expect(synced.status).toBe(201);
    const personId = (synced.body as { user: { id: string } }).user.id;
    const personToken = service.tokens.signAccess({ sub: personId, email: `ida.snapshot.${tag}@example.net`, role: 'user' });
    const admin = await createUser(service, { role: 'admin' });
    const idaHub = await agedHub(service, personToken, ida.name, ida.plan, ida.ip, beats);
    const otherHub = await agedHub(service, admin.accessToken, `Other hub ${tag}`, `other-plan-${tag}`, (i) => `10.250.1.${i}`, beats);

    // Snapshots were written for both, sealed: the raw bytes hold no name, address or metadata.
    for (const hub of [idaHub, otherHub]) {
      const snapshots = await readAll(service.eventStore, deviceSnapshotStream(hub.uuid));
      expect(snapshots.length).toBeGreaterThanOrEqual(2);
      expect(snapshots.every((s) => s.type === DEVICE_SNAPSHOT_EVENT)).toBe(true);
    }
    expect((await readAll(service.eventStore, deviceSnapshotStream(idaHub.uuid))).at(-1)?.data).toMatchObject({ state: { name: ida.name, metadata: { plan: ida.plan } } });

    // What a user or auditor sees holds no snapshot: the export, the history (with heartbeats), the state.
    const exported = await api(service, 'GET', '/users/me/export', { token: personToken });
    expect(exported.status).toBe(200);
    const exportedEvents = (exported.body as { events: Array<{ stream: string; type: string }> }).events;
    expect(exportedEvents.filter((e) => e.type === DEVICE_SNAPSHOT_EVENT || e.stream.startsWith('snapshot-'))).toEqual([]);
    expect(exportedEvents.some((e) => e.stream === `device-${idaHub.uuid}`)).toBe(true);
    const historyTypes = async (uuid: string): Promise<string[]> => {
      const types: string[] = [];
      for (let after: number | null = null; ; ) {
        const page = await api(service, 'GET', `/devices/${uuid}/history?limit=100${after !== null ? `&after=${after}` : ''}`, { token: admin.accessToken });
        expect(page.status).toBe(200);
        const data = (page.body as { data: Array<{ type: string; revision: number }> }).data;
        types.push(...data.map((e) => e.type));
        if (data.length < 100) return types;
        after = data.at(-1)?.revision ?? after;
      }
    };
    const idaHistory = await historyTypes(idaHub.uuid);
    expect(idaHistory.length).toBeGreaterThan(2 * DEVICE_SNAPSHOT_EVERY);
    expect(idaHistory).not.toContain(DEVICE_SNAPSHOT_EVENT);
    const withBeats = await api(service, 'GET', `/devices/${idaHub.uuid}/history?include=heartbeats&limit=100`, { token: admin.accessToken });
    expect(JSON.stringify(withBeats.body)).not.toContain(DEVICE_SNAPSHOT_EVENT);

    // Erasure of the hub's only owner, through the CRM.
    expect(await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } })).toMatchObject({ status: 200, body: { erased: true, userId: personId } });

    // Every snapshot of the erased household's hub reads "[erased]" through the service's own store.
    const after = await readAll(service.eventStore, deviceSnapshotStream(idaHub.uuid));
    expect(after.length).toBeGreaterThanOrEqual(2);
    for (const s of after) expect(s.data).toMatchObject({ state: { name: ERASED, ipAddress: ERASED, metadata: ERASED } });
    // The other household's snapshots still open.
    expect((await readAll(service.eventStore, deviceSnapshotStream(otherHub.uuid))).at(-1)?.data).toMatchObject({ state: { name: `Other hub ${tag}` } });
    // The audit endpoints: the events, erased, still no snapshot.
    const audit = await api(service, 'GET', `/devices/${idaHub.uuid}/history?limit=100`, { token: admin.accessToken });
    expect(audit.status).toBe(200);
    expect(JSON.stringify(audit.body)).not.toContain(DEVICE_SNAPSHOT_EVENT);
    expect(foundIn(JSON.stringify(audit.body), secrets)).toEqual([]);
    expect(await historyTypes(idaHub.uuid)).toEqual([...idaHistory, 'UserUnlinked', 'DeviceDeleted']);
    // The deleted hub refuses its token (a cold fold or a cached one: the same answer).
    expect((await api(service, 'POST', `/devices/heartbeat/${idaHub.uuid}`, { token: idaHub.current, body: {} })).status).toBe(401);
    // A rebuild from the log (snapshot streams in it) gives the read models it had.
    const live = await snapshotReadModels(service.readStore);
    expect((await api(service, 'POST', '/admin/read-models/rebuild', { token: admin.accessToken })).status).toBe(200);
    expect(await snapshotReadModels(service.readStore)).toEqual(live);

    // The bytes.
    if (mode === 'distributed') {
      expect(foundIn(await esdbText(service.env.EVENTSTORE_URL as string), secrets)).toEqual([]);
      // Another API process: its first fold of the other hub is cold (from the newest snapshot).
      const another = await service.startAnother();
      stopped.push(another);
      await expectTokens(another, otherHub);
      return;
    }
    const dir = dataDir as string;
    expect(filesUnder(dir).flatMap((f) => foundIn(readFileSync(f), secrets).map((s) => `${f}: ${s}`))).toEqual([]);

    // Embedded: `npm run replay` on the stopped DATA_DIR, then restarts with and without the start snapshot.
    const expectedHistory = (await api(service, 'GET', `/devices/${otherHub.uuid}/history?limit=100`, { token: admin.accessToken })).body;
    const expectedState = (await api(service, 'GET', `/devices/${otherHub.uuid}/state`, { token: admin.accessToken })).body as { at: string };
    const models = await snapshotReadModels(service.readStore);
    await service.stop();
    const history = await runReplay({ DATA_DIR: dir }, ['history', otherHub.uuid, '--limit', '100']);
    expect({ code: history.code, stderr: history.stderr }).toEqual({ code: 0, stderr: '' });
    expect(JSON.parse(history.stdout)).toEqual(expectedHistory);
    const state = await runReplay({ DATA_DIR: dir }, ['state', otherHub.uuid, '--at', expectedState.at]);
    expect(JSON.parse(state.stdout)).toEqual(expectedState);
    const rebuild = await runReplay({ DATA_DIR: dir }, ['rebuild']);
    expect(rebuild.code).toBe(0);
    expect((JSON.parse(rebuild.stdout) as { collections: Record<string, number> }).collections).toEqual(Object.fromEntries(Object.entries(models).map(([name, docs]) => [name, docs.length])));

    for (const withStartSnapshot of [true, false]) {
      if (!withStartSnapshot) rmSync(join(dir, SNAPSHOT_FILE_NAME), { force: true });
      expect(existsSync(join(dir, SNAPSHOT_FILE_NAME))).toBe(withStartSnapshot);
      const restarted = await startTestService('embedded', { DATA_DIR: dir });
      stopped.push(restarted);
      await expectTokens(restarted, otherHub);
      expect((await api(restarted, 'POST', `/devices/heartbeat/${idaHub.uuid}`, { token: idaHub.current, body: {} })).status).toBe(401);
      await restarted.stop();
    }
  }, 180_000);
});
