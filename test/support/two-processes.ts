import { startTestService, type TestService } from './harness';
import { connect, type Probe } from './tunnel';

/**
 * Two API processes of one service in distributed mode, for tests of what one process sees
 * of what happens on the other. They share the stack (EventStoreDB stand-in, jongodb,
 * private Redis) and nothing in memory: `a` owns the stack, `b` is another process started
 * against it with the same settings.
 *
 * `startTwoProcesses` starts them for a test that stops them itself; `twoProcesses`, called at
 * the top of a file or describe block, registers its own hooks: beforeAll starts `a` then
 * `b`; afterAll closes the sockets opened through `on`, then stops `b`, then `a`.
 */

export interface StartedProcesses {
  readonly a: TestService;
  readonly b: TestService;
  /** Stops `b`, then `a` (and with it the stack). */
  readonly stop: () => Promise<void>;
}

/** Starts `a` with `env` on top of the test defaults, then `b` against its stack; stops `a` again if `b` fails to start. */
export async function startTwoProcesses(env: Record<string, string> = {}): Promise<StartedProcesses> {
  const a = await startTestService('distributed', env);
  let b: TestService;
  try {
    b = await a.startAnother();
  } catch (error) {
    await a.stop();
    throw error;
  }
  return {
    a,
    b,
    stop: async () => {
      await b.stop();
      await a.stop();
    },
  };
}

export interface TwoProcessesOptions {
  /**
   * Settings of both processes on top of the test defaults. A function is called in the
   * fixture's beforeAll: for settings known only once earlier beforeAll hooks have run.
   */
  readonly env?: Record<string, string> | (() => Record<string, string>);
  /** When the sockets opened through `on` are closed: after each test, or once before the processes stop (the default). */
  readonly closeSockets?: 'afterEach' | 'afterAll';
}

export interface TwoProcesses {
  readonly a: () => TestService;
  readonly b: () => TestService;
  /** A socket connected to `target` with `token`, closed by the fixture. */
  readonly on: (target: TestService, token: string) => Promise<Probe>;
}

export function twoProcesses(options: TwoProcessesOptions = {}): TwoProcesses {
  let started: StartedProcesses | undefined;
  const open: Probe[] = [];
  const current = (): StartedProcesses => {
    if (started === undefined) throw new Error('the two processes have not started yet');
    return started;
  };
  const closeSockets = (): void => {
    for (const p of open.splice(0)) p.close();
  };

  beforeAll(async () => {
    started = await startTwoProcesses(typeof options.env === 'function' ? options.env() : options.env);
  }, 120_000);
  if (options.closeSockets === 'afterEach') afterEach(closeSockets);
  afterAll(async () => {
    closeSockets();
    await started?.stop();
  });

  return {
    a: () => current().a,
    b: () => current().b,
    on: async (target, token) => {
      const p = await connect(target, token);
      open.push(p);
      return p;
    },
  };
}
