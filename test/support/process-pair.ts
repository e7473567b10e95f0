import { serviceProcess, type ServiceProcess } from '../chaos/processes';
import { createUser, GENEROUS_RATE_LIMITS, startTestService, type TestService } from './harness';
import { freePort } from './ports';
import { connect, deviceToken, registerHub, request, type Hub, type Probe } from './tunnel';

type User = Awaited<ReturnType<typeof createUser>>;

/**
 * Two API processes in distributed mode for tests that kill or stall one of them: `a` runs in
 * the test (its stack with it), `b` is a child process against the same stack, which a test
 * may kill with SIGKILL. Registers its own hooks: beforeAll starts `a` then `b`; afterAll
 * closes the sockets opened through `on`, runs `beforeStop`, then stops `b` and `a`.
 */
export interface ProcessPair {
  readonly a: () => TestService;
  readonly b: () => ServiceProcess;
  /** A socket connected to `target` with `token`, closed by the fixture. */
  readonly on: (target: { baseUrl: string }, token: string) => Promise<Probe>;
  /** A hub registered on `a`, its device token, and its owner's app socket on `a` subscribed to it. */
  readonly watchedHub: () => Promise<{ readonly owner: User; readonly hub: Hub; readonly token: string; readonly app: Probe }>;
}

export function processPair(options: { readonly startTimeoutMs?: number; readonly beforeStop?: (b: ServiceProcess) => void } = {}): ProcessPair {
  let a: TestService | undefined;
  let b: ServiceProcess | undefined;
  const open: Probe[] = [];

  beforeAll(async () => {
    a = await startTestService('distributed');
    b = serviceProcess('b', await freePort(), { ...a.env, RATE_LIMITS: GENEROUS_RATE_LIMITS, LOG_LEVEL: 'warn' });
    await b.start();
  }, options.startTimeoutMs ?? 120_000);

  afterAll(async () => {
    for (const p of open) p.close();
    if (b !== undefined) {
      options.beforeStop?.(b);
      await b.stop();
    }
    await a?.stop();
  });

  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('the processes have not started yet');
    return value;
  };
  const on = async (target: { baseUrl: string }, token: string): Promise<Probe> => {
    const p = await connect(target, token);
    open.push(p);
    return p;
  };
  return {
    a: () => started(a),
    b: () => started(b),
    on,
    watchedHub: async () => {
      const service = started(a);
      const owner = await createUser(service);
      const hub = await registerHub(service, owner);
      const token = await deviceToken(service, hub, owner);
      const app = await on(service, owner.accessToken);
      await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
      return { owner, hub, token, app };
    },
  };
}
