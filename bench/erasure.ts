/**
 * `npm run bench:erasure`: the time and the bytes of one erasure (decisions §11), in both
 * modes. A household is written first: a CRM user with a password (reset flow), BENCH_LOGINS
 * sessions (3), BENCH_DEVICES hubs they alone own (3) with heartbeats, and a viewer link to
 * another user's hub; then `POST /auth/erase-customer` is timed, BENCH_ROUNDS times (5), each
 * on a new household, and the bytes it wrote are counted: the event log (embedded: the growth
 * of the segment files; both: the events appended and their JSON size as read back raw), the
 * credential store (embedded: the file before and after its rewrite), and the start snapshot
 * written after it (embedded).
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createAccount, login } from '../test/support/accounts';
import { api, CRM_KEY, startTestService, type Mode, type TestService } from '../test/support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../test/support/smtp';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const LOGINS = Number(process.env.BENCH_LOGINS ?? 3);
const DEVICES = Number(process.env.BENCH_DEVICES ?? 3);
const MODES = (process.env.BENCH_MODES ?? 'embedded,distributed').split(',') as Mode[];

function sizes(dir: string): { log: number; credentials: number; snapshot: number } {
  let log = 0;
  let credentials = 0;
  let snapshot = 0;
  for (const name of readdirSync(dir)) {
    const size = statSync(join(dir, name)).size;
    if (/^events(-\d+)?\.log$/.test(name)) log += size;
    else if (name === 'credentials.jsonl') credentials = size;
    else if (name === 'read-models.snapshot') snapshot = size;
  }
  return { log, credentials, snapshot };
}

async function household(service: TestService, smtp: TestSmtpServer, otherHub: string, otherToken: string): Promise<{ syncId: number }> {
  const account = await createAccount(service, smtp);
  const events: Array<{ type: string; data: { syncId?: number } }> = [];
  for await (const e of service.eventStore.readStream(`user-${account.id}`)) events.push(e as never);
  const syncId = events.find((e) => e.type === 'UserSynced')?.data.syncId as number;
  let token = '';
  for (let i = 0; i < LOGINS; i++) token = (await login(service, account.email, account.password)).accessToken;
  for (let d = 0; d < DEVICES; d++) {
    const uuid = randomUUID();
    await api(service, 'POST', '/devices/register', { token, body: { uuid, deviceId: `B-${d}`, name: `Bench hub ${d}`, ipAddress: '10.0.0.1', metadata: { floor: d } } });
    const hubToken = ((await api(service, 'POST', `/devices/auth/${uuid}`, { token })).body as { token: string }).token;
    await api(service, 'POST', `/devices/heartbeat/${uuid}`, { token: hubToken, body: { ipAddress: '10.0.0.2' } });
  }
  await api(service, 'POST', `/devices/${otherHub}/link`, { token: otherToken, body: { email: account.email, role: 'viewer' } });
  return { syncId };
}

async function countEvents(service: TestService): Promise<number> {
  let n = 0;
  const sub = service.eventStore.subscribe();
  for await (const item of sub) {
    if (item.kind === 'caught-up') break;
    n++;
  }
  await sub.close();
  return n;
}

async function runMode(mode: Mode): Promise<void> {
  const smtp = await startTestSmtpServer();
  const service = await startTestService(mode, { SMTP_URL: smtp.url, LOG_LEVEL: 'warn' });
  try {
    const other = await createAccount(service, smtp);
    const otherToken = (await login(service, other.email, other.password)).accessToken;
    const otherHub = randomUUID();
    await api(service, 'POST', '/devices/register', { token: otherToken, body: { uuid: otherHub, deviceId: 'O-1', name: 'Other hub' } });
    const rows: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const { syncId } = await household(service, smtp, otherHub, otherToken);
      const before = mode === 'embedded' ? sizes(service.env.DATA_DIR as string) : null;
      const eventsBefore = await countEvents(service);
      const started = process.hrtime.bigint();
      const res = await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      if (res.status !== 200) throw new Error(`erase-customer answered ${res.status}`);
      const appended = (await countEvents(service)) - eventsBefore;
      const after = mode === 'embedded' ? sizes(service.env.DATA_DIR as string) : null;
      rows.push(
        `| ${mode} | ${round + 1} | ${ms.toFixed(1)} | ${appended} | ` +
          (before !== null && after !== null
            ? `${after.log - before.log} | ${before.credentials} → ${after.credentials} | ${after.snapshot} |`
            : '— | — | — |'),
      );
    }
    for (const row of rows) console.log(row);
  } finally {
    await service.stop();
    await smtp.stop();
  }
}

async function main(): Promise<void> {
  console.log(`households: ${LOGINS} sessions, ${DEVICES} hubs owned alone (each with a heartbeat), 1 viewer link to another hub`);
  console.log('| mode | round | erase-customer ms | events appended | log bytes appended | credentials bytes before → after | snapshot bytes written |');
  console.log('| --- | ---: | ---: | ---: | ---: | --- | ---: |');
  for (const mode of MODES) await runMode(mode);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
