/**
 * `npm run user -- create <email> [--first-name A] [--last-name B] [--password-stdin] [--admin]`:
 * a first user without the CRM, for development and small installs.
 *
 * It goes through the service's own front door, not into the stores: it starts the
 * service in this process on a loopback port (the api and projector roles), then calls
 * `POST /auth/sync-customer` with the service's CRM key, exactly as the CRM would, and
 * `POST /auth/password-reset/request`. Without SMTP_URL the reset mail is written to the
 * log, from which it prints the token and the command that sets a password; with
 * `--password-stdin` it sets the password itself through `POST /auth/password-reset/confirm`.
 *
 * Embedded mode opens the event log, which one process holds at a time: stop the service
 * first. Distributed mode is refused unless `--allow-distributed` says it is meant.
 */
import { createHash } from 'node:crypto';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type Config } from '../config';
import { EventStoreLockedError } from '../infra/eventstore/embedded';
import { createLogger } from '../logger';
import { resolveEmbeddedSecrets } from '../secrets';
import { startService } from '../service';

const USAGE = `Usage: npm run user -- create <email> [options]

  --first-name <name>    default: the part of the e-mail before the @
  --last-name <name>     default: "User"
  --password-stdin       read a password (8 to 128 characters) from the first line of stdin and set it
  --admin                print how to make this user an admin (ADMIN_EMAILS)
  --allow-distributed    run against the distributed stores (EVENTSTORE_URL, MONGODB_URI, REDIS_URL)
`;

class UsageError extends Error {}

/** A stable CRM id for a user made here: the same e-mail gives the same id, so a second run updates. */
function localCustomerId(email: string): number {
  return 0x4000_0000 + (createHash('sha256').update(email).digest().readUInt32BE(0) % 0x3fff_ffff);
}

const RESET_TOKEN = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[A-Za-z0-9_-]{43})$/m;

async function readFirstLine(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) {
    text += String(chunk);
    if (text.includes('\n')) break;
  }
  return text.split('\n')[0]?.replace(/\r$/, '') ?? '';
}

async function call(base: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${base}/api/v1${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text.length > 0 ? (JSON.parse(text) as unknown) : null };
}

function crmKey(config: Config): string {
  const keys = config.mode === 'embedded' ? resolveEmbeddedSecrets(config).secrets.internalApiKeys : config.secrets.internalApiKeys;
  const key = keys?.[0];
  if (key === undefined) throw new UsageError('INTERNAL_API_KEYS is not set');
  return key;
}

async function create(args: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      'first-name': { type: 'string' },
      'last-name': { type: 'string' },
      'password-stdin': { type: 'boolean', default: false },
      admin: { type: 'boolean', default: false },
      'allow-distributed': { type: 'boolean', default: false },
    },
  });
  const email = positionals[0]?.trim().toLowerCase();
  if (email === undefined || !/^[^@\s]+@[^@\s]+$/.test(email)) throw new UsageError('create needs an e-mail address');
  const password = values['password-stdin'] ? await readFirstLine() : null;

  const config = loadConfig({ ...process.env, PORT: '0', HOST: '127.0.0.1' });
  if (config.mode === 'distributed' && !values['allow-distributed']) {
    throw new UsageError('the configuration is distributed (EVENTSTORE_URL, MONGODB_URI, REDIS_URL): add --allow-distributed if that is meant');
  }
  // The service's log, kept here: the reset mail lands in it when SMTP_URL is unset.
  let log = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      log += chunk.toString();
      done();
    },
  });
  const roles: Config['roles'] = config.mode === 'embedded' ? ['api', 'projector'] : ['api'];
  const service = await startService({ ...config, roles }, createLogger('info', sink));
  try {
    const base = `http://127.0.0.1:${service.port}`;
    const local = email.split('@')[0] ?? 'user';
    const synced = await call(
      base,
      '/auth/sync-customer',
      { id: localCustomerId(email), first_name: values['first-name'] ?? local, last_name: values['last-name'] ?? 'User', email, active: true },
      { 'X-Internal-Api-Key': crmKey(config) },
    );
    if (synced.status !== 200 && synced.status !== 201) throw new UsageError(`the service refused the user: ${JSON.stringify(synced.body)}`);
    const user = (synced.body as { user: { id: string } }).user;
    process.stdout.write(`${synced.status === 201 ? 'Created' : 'Updated'} ${email} (id ${user.id}).\n`);

    await call(base, '/auth/password-reset/request', { email });
    // The request is answered before the mail goes out: give it a moment to reach the log.
    let token: string | undefined;
    for (let waited = 0; token === undefined && waited < 5000 && config.smtpUrl === undefined; waited += 50) {
      token = RESET_TOKEN.exec(log.replace(/\\n/g, '\n'))?.[1];
      if (token === undefined) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    if (password !== null) {
      if (token === undefined) throw new UsageError('no reset token reached the log (is SMTP_URL set?): set the password from the reset mail');
      const confirmed = await call(base, '/auth/password-reset/confirm', { token, password });
      if (confirmed.status !== 200) throw new UsageError(`the password was refused: ${JSON.stringify(confirmed.body)}`);
      process.stdout.write('Password set: log in with POST /api/v1/auth/login.\n');
    } else if (token !== undefined) {
      process.stdout.write(
        `Set a password within the hour (the service at http://localhost:${process.env.PORT ?? '3000'}):\n` +
          `  curl -X POST http://localhost:${process.env.PORT ?? '3000'}/api/v1/auth/password-reset/confirm \\\n` +
          `    -H 'Content-Type: application/json' -d '{"token": "${token}", "password": "<8 to 128 characters>"}'\n`,
      );
    } else {
      process.stdout.write(`A password-reset mail went to ${email} (SMTP_URL): its token sets the password.\n`);
    }
    if (values.admin) process.stdout.write(`Admin: start the service with ADMIN_EMAILS=${email} (roles come from that list).\n`);
  } finally {
    await service.stop();
  }
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command !== 'create') throw new UsageError(command === undefined ? 'a command is needed' : `unknown command ${command}`);
    await create(rest);
    return 0;
  } catch (error) {
    if (error instanceof EventStoreLockedError) {
      process.stderr.write(
        `The service is running on this DATA_DIR (${error.holder}); the event log is opened by one process at a time.\n` +
          'Stop it and run this again, or create the user through POST /api/v1/auth/sync-customer with the key in DATA_DIR/secrets.json.\n',
      );
      return 1;
    }
    if (error instanceof UsageError || error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n\n${USAGE}`);
      return 2;
    }
    throw error;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
