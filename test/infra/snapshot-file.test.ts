import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSnapshotFile, temporaryFile, writeSnapshotFile, type SnapshotHeader } from '../../src/infra/snapshot/file';

/**
 * The snapshot file (src/infra/snapshot/file.ts): what is written is read back as it was;
 * a file cut short anywhere, or with any byte of its body changed, is never taken for a good
 * one; another file format is stale; a `.tmp` left by a crash does not replace the snapshot.
 */

const header: SnapshotHeader = { version: 'v1', position: '120/120', writtenAt: '2026-11-25T00:00:00.000Z' };
const body = { readModels: { checkpoints: { projector: '120/120' }, collections: { devices: [{ doc: { id: 'd1', name: 'Hub ü' }, guard: 'g1' }] } }, revocations: null };

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'hhc-snapfile-'));
  file = join(dir, 'read-models.snapshot');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('what is written is read back, with its header', async () => {
  const bytes = await writeSnapshotFile(file, header, body);
  expect(readFileSync(file).length).toBe(bytes);
  expect(await readSnapshotFile(file)).toEqual({ kind: 'ok', header, body, bytes });
});

test('a missing file is missing', async () => {
  expect(await readSnapshotFile(file)).toEqual({ kind: 'missing' });
});

test('a file cut short at any length is never read as good', async () => {
  await writeSnapshotFile(file, header, body);
  const whole = readFileSync(file);
  const reasons = new Set<string>();
  for (let length = 0; length < whole.length; length++) {
    writeFileSync(file, whole.subarray(0, length));
    const read = await readSnapshotFile(file);
    expect(read.kind).toBe('unusable');
    if (read.kind === 'unusable') reasons.add(read.reason);
  }
  // Cut in the header line (no newline yet) or in the body: said to be truncated, either way.
  expect([...reasons]).toEqual(['truncated']);
});

test('any changed byte of the body is caught by the checksum', async () => {
  await writeSnapshotFile(file, header, body);
  const whole = readFileSync(file);
  const bodyStart = whole.indexOf(0x0a) + 1;
  for (let at = bodyStart; at < whole.length; at++) {
    const changed = Buffer.from(whole);
    changed[at] = (changed[at] as number) ^ 0x01;
    writeFileSync(file, changed);
    expect(await readSnapshotFile(file)).toMatchObject({ kind: 'unusable', reason: 'damaged' });
  }
});

test('bytes after the declared body are damage, not ignored', async () => {
  await writeSnapshotFile(file, header, body);
  writeFileSync(file, Buffer.concat([readFileSync(file), Buffer.from('{}')]));
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'unusable', reason: 'damaged' });
});

test('another file format is stale', async () => {
  await writeSnapshotFile(file, header, body);
  const text = readFileSync(file, 'utf8').replace('"format":1', '"format":2');
  writeFileSync(file, text);
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'unusable', reason: 'stale' });
});

test('a write interrupted before its rename leaves the previous snapshot in place', async () => {
  await writeSnapshotFile(file, header, body);
  // What a crash during the next write leaves: part of a new snapshot in the temporary file.
  writeFileSync(temporaryFile(file), '{"magic":"hhc-snapshot","format":1');
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', body });
  // The next write replaces the temporary file and the snapshot.
  const next = { ...body, revocations: { position: '130/130', state: [] } };
  await writeSnapshotFile(file, { ...header, position: '130/130' }, next);
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', body: next });
});
