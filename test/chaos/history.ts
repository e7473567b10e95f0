/**
 * The history of a chaos run: every request with its outcome, and every fault, in the
 * order they happened. An outcome is definite (the service answered, any status) or
 * indeterminate (refused, reset or timed out: the write may or may not have taken effect),
 * which is what the invariants must allow for.
 */

export interface Operation {
  readonly id: number;
  readonly worker: number;
  readonly kind: string;
  /** The entity the operation touches (`device:<uuid>`, `user:<customerId>`, `family:<n>`), for the shortest history. */
  readonly entity: string;
  readonly method: string;
  readonly path: string;
  readonly target: string;
  readonly requestId: string;
  readonly startedAt: number;
  endedAt: number;
  /** HTTP status, or null when no answer came. */
  status: number | null;
  error: string | null;
  body: unknown;
  readonly summary: string;
}

export interface Fault {
  readonly kind: string;
  readonly target: string;
  readonly at: number;
  /** When what the fault took away was back (a process serving, Redis answering). */
  recoveredAt: number;
}

export class History {
  readonly operations: Operation[] = [];
  readonly faults: Fault[] = [];
  private nextId = 1;

  begin(op: Omit<Operation, 'id' | 'endedAt' | 'status' | 'error' | 'body' | 'requestId' | 'startedAt'>): Operation {
    const id = this.nextId++;
    const record: Operation = { ...op, id, requestId: `chaos-op-${id}`, startedAt: Date.now(), endedAt: 0, status: null, error: null, body: null };
    this.operations.push(record);
    return record;
  }

  fault(kind: string, target: string): Fault {
    const fault: Fault = { kind, target, at: Date.now(), recoveredAt: Number.POSITIVE_INFINITY };
    this.faults.push(fault);
    return fault;
  }

  /** Whether `at` falls in a fault's window (from the fault until `graceMs` after recovery). */
  duringFault(at: number, graceMs: number): boolean {
    return this.faults.some((f) => at >= f.at - 50 && at <= f.recoveredAt + graceMs);
  }

  /** The operations on one entity, in order: the shortest history that shows what happened to it. */
  of(entity: string): Operation[] {
    return this.operations.filter((op) => op.entity === entity);
  }

  acknowledged(): number {
    return this.operations.filter((op) => op.status !== null && op.status < 300).length;
  }

  indeterminate(): number {
    return this.operations.filter((op) => op.status === null).length;
  }
}

export function definite(op: Operation): boolean {
  return op.status !== null;
}

export function ok(op: Operation): boolean {
  return op.status !== null && op.status >= 200 && op.status < 300;
}

/** One line per operation, with the faults around it, for a failure report. */
export function formatHistory(ops: readonly Operation[], faults: readonly Fault[], start: number): string {
  const lines: Array<{ at: number; text: string }> = ops.map((op) => ({
    at: op.startedAt,
    text: `  #${op.id} w${op.worker} ${op.kind} ${op.method} ${op.path} ${op.summary} -> ${op.status ?? `no answer (${op.error ?? '?'})`} [${op.target}, ${op.endedAt - op.startedAt} ms]`,
  }));
  if (ops.length > 0) {
    const first = ops[0]?.startedAt ?? 0;
    const last = Math.max(...ops.map((op) => op.endedAt));
    for (const f of faults) if (f.at >= first - 1000 && f.at <= last) lines.push({ at: f.at, text: `  !! fault ${f.kind} ${f.target}` });
  }
  return lines
    .sort((a, b) => a.at - b.at)
    .map((l) => `${String(((l.at - start) / 1000).toFixed(3)).padStart(9)}s ${l.text}`)
    .join('\n');
}
