import { isBuiltin } from 'node:module';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * The two client packages stand on their own: each compiles with its own tsconfig against
 * the tunnel contract's published declarations, and what it emits requires nothing but its
 * declared dependencies (no server code). The app client's REST types are the ones the
 * service's OpenAPI document gives today: a route change that breaks apps fails here until
 * `npm run generate:app-client` is run, and then `npm run typecheck` shows what broke.
 */

const ROOT = resolve(__dirname, '../..');
const TSC = join(ROOT, 'node_modules', '.bin', 'tsc');

const TYPES = join(ROOT, 'clients', 'app', 'src', 'openapi.ts');
const check = (file: string): { status: number | null; output: string } => {
  const run = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts', 'app-client-types.ts'), '--check', '--file', file], { cwd: ROOT, encoding: 'utf8' });
  return { status: run.status, output: run.stdout + run.stderr };
};

test('the app client types are generated from the current OpenAPI document (npm run generate:app-client)', () => {
  expect(check(TYPES)).toEqual({ status: 0, output: 'app client types are up to date\n' });
  // A route the document no longer has, as if an operation had been renamed: stale.
  const dir = mkdtempSync(join(tmpdir(), 'hhc-types-'));
  try {
    const stale = join(dir, 'openapi.ts');
    writeFileSync(stale, readFileSync(TYPES, 'utf8').replace('"/devices/register"', '"/devices/enrol"'));
    expect(check(stale).status).toBe(1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);

describe('each client package builds alone', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-clients-'));
    // The contract as published: its dist/ (declarations and JavaScript).
    execFileSync(TSC, ['-p', join(ROOT, 'src/tunnel/contract/tsconfig.json'), '--outDir', join(dir, 'contract')], { stdio: 'pipe' });
  }, 60_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test.each([
    ['hub', ['socket.io-client', '@home-hub-cloud/tunnel-contract']],
    ['app', ['socket.io-client', '@home-hub-cloud/tunnel-contract', 'openapi-fetch']],
  ])('%s client: compiles with its own tsconfig; requires only its dependencies', (name, dependencies) => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'clients', name, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    expect(Object.keys(pkg.dependencies).sort()).toEqual([...dependencies].sort());
    const config = join(dir, `${name}.tsconfig.json`);
    const base = JSON.parse(readFileSync(join(ROOT, 'clients', name, 'tsconfig.json'), 'utf8')) as { compilerOptions: { paths: Record<string, string[]> } };
    writeFileSync(
      config,
      JSON.stringify({
        extends: join(ROOT, 'clients', name, 'tsconfig.json'),
        compilerOptions: {
          outDir: join(dir, name),
          rootDir: join(ROOT, 'clients', name, 'src'),
          baseUrl: join(ROOT, 'clients', name),
          paths: { ...base.compilerOptions.paths, '@home-hub-cloud/tunnel-contract': [join(dir, 'contract', 'events.d.ts')] },
        },
        include: [join(ROOT, 'clients', name, 'src')],
      }),
    );
    execFileSync(TSC, ['-p', config], { stdio: 'pipe' });
    const required = new Set<string>();
    for (const file of readdirSync(join(dir, name)).filter((f) => f.endsWith('.js'))) {
      for (const match of readFileSync(join(dir, name, file), 'utf8').matchAll(/require\("([^"]+)"\)/g)) required.add(match[1] ?? '');
    }
    // The hub client is for Node 20+ and may use Node's own modules (agentFetch: node:http); the app client runs in browsers too.
    const external = [...required].filter((m) => !m.startsWith('./') && !(name === 'hub' && m.startsWith('node:') && isBuiltin(m)));
    expect(external.sort()).toEqual([...dependencies].sort());
  }, 60_000);
});
