import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import * as contract from '../../src/tunnel/contract/events';
import { api, startTestService, type TestService } from '../support/harness';

/**
 * The tunnel contract as a package of its own (src/tunnel/contract): the typed event maps
 * with no server code, publishable alone, and an AsyncAPI description of the same events,
 * linked from the API reference page.
 */

const ROOT = resolve(__dirname, '../..');
const PACKAGE = join(ROOT, 'src/tunnel/contract');

describe('the tunnel contract package', () => {
  let work: string;
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'hhc-contract-'));
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  test('imports nothing: no server code comes with it', () => {
    const source = readFileSync(join(PACKAGE, 'events.ts'), 'utf8');
    expect(source).not.toMatch(/^\s*import\s/m);
    expect(source).not.toMatch(/require\(/);
  });

  test('builds and type-checks on its own, outside the repository, as an app would use it', () => {
    const copy = join(work, 'tunnel-contract');
    cpSync(PACKAGE, copy, { recursive: true, filter: (src) => !src.includes(`${PACKAGE}/dist`) });
    execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['-p', join(copy, 'tsconfig.json')], { stdio: 'pipe' });
    expect(readdirSync(join(copy, 'dist')).sort()).toEqual(['events.d.ts', 'events.js']);
    const manifest = JSON.parse(readFileSync(join(copy, 'package.json'), 'utf8')) as { name: string; dependencies?: unknown; types: string };
    expect(manifest.name).toBe('@home-hub-cloud/tunnel-contract');
    expect(manifest.dependencies).toBeUndefined();
    // An app written against the package's declarations alone.
    writeFileSync(
      join(work, 'app.ts'),
      `import { TUNNEL_NAMESPACE, type AppToServerEvents, type ServerToAppEvents, type SubscribeAck } from './tunnel-contract/dist/events';
const ack: SubscribeAck = { success: true, deviceUuid: 'u', isOnline: false, tunnelConnected: true };
type Listen = ServerToAppEvents['device:status'];
const onStatus: Listen = (s) => void s.tunnelConnected;
type Emit = AppToServerEvents['tunnel:message'];
export { ack, onStatus, TUNNEL_NAMESPACE };
export type { Emit };
`,
    );
    execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['--noEmit', '--strict', '--target', 'es2022', '--moduleResolution', 'node', join(work, 'app.ts')], { stdio: 'pipe' });
  }, 60_000);

  test('the AsyncAPI document describes every event and every error code of the typed maps', () => {
    const doc = JSON.parse(readFileSync(join(PACKAGE, 'asyncapi.json'), 'utf8')) as {
      asyncapi: string;
      components: { messages: Record<string, { name: string }>; schemas: { TunnelError: { properties: { code: { enum: string[] } } }; DeviceStatus: { required: string[] } } };
    };
    expect(doc.asyncapi).toBe('3.0.0');
    expect(new Set(Object.values(doc.components.messages).map((m) => m.name))).toEqual(new Set(Object.values(contract.TUNNEL_EVENTS)));
    expect(doc.components.schemas.TunnelError.properties.code.enum).toEqual([...contract.TUNNEL_ERROR_CODES]);
    expect(doc.components.schemas.DeviceStatus.required).toEqual(['deviceUuid', 'isOnline', 'lastSeenAt', 'tunnelConnected', 'tunnelSeq']);
  });

  describe('served with the API reference', () => {
    let service: TestService;
    beforeAll(async () => {
      service = await startTestService('embedded');
    }, 60_000);
    afterAll(() => service?.stop());

    test('the docs page links the AsyncAPI document, which the service serves', async () => {
      const page = await fetch(`${service.baseUrl}/api/v1/docs`);
      expect(await page.text()).toContain('href="/api/v1/docs/asyncapi.json"');
      const res = await api(service, 'GET', '/docs/asyncapi.json');
      expect(res.status).toBe(200);
      expect((res.body as { asyncapi: string }).asyncapi).toBe('3.0.0');
    });
  });
});
