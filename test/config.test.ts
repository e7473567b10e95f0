import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../src/config';

const secrets = {
  JWT_ACCESS_SECRET: 'a'.repeat(40),
  JWT_REFRESH_SECRET: 'b'.repeat(40),
  JWT_DEVICE_SECRET: 'c'.repeat(40),
  INTERNAL_API_KEYS: 'k1, k2',
  DATA_KEY_ENCRYPTION_KEY: 'd'.repeat(40),
};
const services = { EVENTSTORE_URL: 'esdb://127.0.0.1:2113?tls=false', MONGODB_URI: 'mongodb://127.0.0.1:27017/hhc', REDIS_URL: 'redis://127.0.0.1:6379' };

function problemsOf(env: NodeJS.ProcessEnv): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return [...error.problems];
    throw error;
  }
  return [];
}

describe('configuration', () => {
  test('no configuration at all is embedded mode with the documented defaults', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      mode: 'embedded',
      port: 3000,
      host: '0.0.0.0',
      dataDir: './data',
      maxDevicesPerUser: 100,
      offlineAfterSeconds: 300,
      roles: ['api', 'projector', 'expiry'],
      // A crash start replays at most about this many events after the last snapshot (bench/README.md, "Crash start").
      snapshotEveryEvents: 20_000,
      snapshotIntervalSeconds: 300,
    });
  });

  test('the three service URLs switch on distributed mode', () => {
    const config = loadConfig({ ...services, ...secrets });
    expect(config.mode).toBe('distributed');
    if (config.mode !== 'distributed') return;
    expect(config.secrets.internalApiKeys).toEqual(['k1', 'k2']);
    expect(config.redisUrl).toBe(services.REDIS_URL);
  });

  test('distributed mode has no default secrets: each missing one is named', () => {
    const problems = problemsOf({ ...services });
    for (const name of ['JWT_ACCESS_SECRET', 'JWT_REFRESH_SECRET', 'JWT_DEVICE_SECRET', 'INTERNAL_API_KEYS', 'DATA_KEY_ENCRYPTION_KEY']) {
      expect(problems.some((p) => p.startsWith(name))).toBe(true);
    }
  });

  test('only some of the service URLs is an error naming the missing ones', () => {
    const problems = problemsOf({ EVENTSTORE_URL: services.EVENTSTORE_URL, ...secrets });
    expect(problems.some((p) => p.startsWith('MONGODB_URI'))).toBe(true);
    expect(problems.some((p) => p.startsWith('REDIS_URL'))).toBe(true);
  });

  test.each([
    ['PORT', 'eighty'],
    ['PORT', '70000'],
    ['MAX_DEVICES_PER_USER', '0'],
    ['OFFLINE_AFTER_SECONDS', '-5'],
    ['REDIS_URL', 'http://nope'],
    ['APP_ORIGIN', 'not a url'],
    ['LOG_LEVEL', 'loud'],
    ['ROLES', 'api,cook'],
    ['JWT_ACCESS_SECRET', 'short'],
  ])('a bad %s (%s) is refused by name', (name, value) => {
    const problems = problemsOf({ [name]: value });
    expect(problems.some((p) => p.startsWith(name))).toBe(true);
  });

  test('TRUST_PROXY takes the values Express understands', () => {
    expect(loadConfig({ TRUST_PROXY: 'true' }).trustProxy).toBe(true);
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
    expect(loadConfig({ TRUST_PROXY: 'loopback, 10.0.0.1' }).trustProxy).toBe('loopback, 10.0.0.1');
    expect(loadConfig({}).trustProxy).toBeUndefined();
    expect(loadConfig({ TRUST_PROXY: '10.0.0.0/8,uniquelocal' }).trustProxy).toBe('10.0.0.0/8,uniquelocal');
  });

  test('what Express could not compile, timers Node would run after 1 ms, and a key list with no key are refused, naming the variable', () => {
    const problems = (env: NodeJS.ProcessEnv): readonly string[] => {
      try {
        loadConfig(env);
        return [];
      } catch (error) {
        return error instanceof ConfigError ? error.problems : [String(error)];
      }
    };
    expect(problems({ TRUST_PROXY: 'yes' })).toEqual([expect.stringMatching(/^TRUST_PROXY: .*invalid IP address: yes/)]);
    expect(problems({ TRUST_PROXY: '-1' })).toEqual([expect.stringMatching(/^TRUST_PROXY: /)]);
    expect(problems({ READ_YOUR_WRITES_TIMEOUT_MS: '2147483648' })).toEqual([expect.stringMatching(/^READ_YOUR_WRITES_TIMEOUT_MS: must be at most 2147483647/)]);
    expect(problems({ PROJECTOR_LEASE_MS: '9999999999' })).toEqual([expect.stringMatching(/^PROJECTOR_LEASE_MS: must be at most/)]);
    expect(problems({ SNAPSHOT_INTERVAL_SECONDS: '2147484' })).toEqual([expect.stringMatching(/^SNAPSHOT_INTERVAL_SECONDS: must be at most 2147483/)]);
    expect(problems({ INTERNAL_API_KEYS: ' , ,' })).toEqual(['INTERNAL_API_KEYS: holds no key (a comma list of keys)']);
    expect(problems({ STORE_START_TIMEOUT_SECONDS: '0' })).toEqual([expect.stringMatching(/^STORE_START_TIMEOUT_SECONDS: /)]);
    expect(loadConfig({}).storeStartTimeoutSeconds).toBe(30);
    expect(loadConfig({ STORE_START_TIMEOUT_SECONDS: '5' }).storeStartTimeoutSeconds).toBe(5);
    // The largest values that work are taken.
    expect(loadConfig({ READ_YOUR_WRITES_TIMEOUT_MS: '2147483647', SNAPSHOT_INTERVAL_SECONDS: '2147483' }).readYourWritesTimeoutMs).toBe(2_147_483_647);
    expect(loadConfig({ INTERNAL_API_KEYS: 'a,,b' }).secrets.internalApiKeys).toEqual(['a', 'b']);
  });

  test('a bad value stops the process with a message naming the variable', () => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', join(__dirname, '..', 'src', 'main.ts')], {
      env: { PATH: process.env.PATH ?? '', PORT: 'not-a-port' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(result.status).toBe(1);
    expect(result.stderr).toContain('PORT');
  });

  test.each([
    ['DATA_DIR', { DATA_DIR: '/etc/passwd' }],
    ['HOST', { HOST: 'no.such.host.invalid', DATA_DIR: join(tmpdir(), `hhc-config-host-${process.pid}`) }],
  ])('what the system refuses at start (%s) is said with the variable that chose it, without a stack trace', (variable, env) => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', join(__dirname, '..', 'src', 'main.ts')], {
      env: { PATH: process.env.PATH ?? '', PORT: '0', LOG_LEVEL: 'silent', ...env },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(result.status).toBe(1);
    expect(result.stderr).toMatch(new RegExp(`^Failed to start: ${variable}\\b`, 'm'));
    expect(result.stderr).not.toMatch(/\n\s+at .+:\d+:\d+/);
  });
});
