import type { History, Operation } from './history';

/**
 * HTTP as the workload's clients speak it: every request recorded in the history with its
 * outcome, bounded in time, sent to one of the API processes (as a load balancer would).
 * Every write carries its operation's id as `X-Request-Id`, which the service writes into
 * the events it causes: that is how duplicated effects are found afterwards.
 */

export const CRM_KEY = 'test-crm-key-1';
const REQUEST_TIMEOUT_MS = 8_000;

export interface Request {
  readonly worker: number;
  readonly kind: string;
  readonly entity: string;
  readonly method: string;
  readonly path: string;
  readonly token?: string;
  readonly crm?: boolean;
  readonly body?: unknown;
  readonly summary?: string;
}

export class Client {
  constructor(
    private readonly history: History,
    private readonly targets: readonly string[],
  ) {}

  /** `pick` is a number in [0, 1) from the caller's seeded generator: which process answers. */
  async send(request: Request, pick: number): Promise<Operation> {
    const target = this.targets[Math.floor(pick * this.targets.length)] ?? this.targets[0] ?? '';
    const op = this.history.begin({
      worker: request.worker,
      kind: request.kind,
      entity: request.entity,
      method: request.method,
      path: request.path,
      target: target.replace('http://127.0.0.1:', ':'),
      summary: request.summary ?? '',
    });
    const headers: Record<string, string> = { 'X-Request-Id': op.requestId };
    if (request.token !== undefined) headers.Authorization = `Bearer ${request.token}`;
    if (request.crm === true) headers['X-Internal-Api-Key'] = CRM_KEY;
    if (request.body !== undefined) headers['Content-Type'] = 'application/json';
    try {
      const res = await fetch(`${target}/api/v1${request.path}`, {
        method: request.method,
        headers,
        ...(request.body !== undefined ? { body: JSON.stringify(request.body) } : {}),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      const text = await res.text();
      op.status = res.status;
      op.body = parse(text);
    } catch (error) {
      op.error = describe(error);
    }
    op.endedAt = Date.now();
    return op;
  }
}

function parse(text: string): unknown {
  try {
    return text.length > 0 ? JSON.parse(text) : null;
  } catch {
    return text;
  }
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as Error & { cause?: { code?: string } }).cause;
  return cause?.code ?? error.name;
}
