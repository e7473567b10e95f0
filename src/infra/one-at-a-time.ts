/**
 * Work run one at a time per key, in the order it came, within this process: what a check
 * against a read model needs when two requests of one key would otherwise both pass it (a
 * user's registrations at the device limit).
 */
/** Runs work one at a time per key (in this process: OneAtATime; across processes: src/infra/redis-one-at-a-time.ts). */
export interface KeyedSerializer {
  run<T>(key: string, work: () => Promise<T>): Promise<T>;
}

export class OneAtATime implements KeyedSerializer {
  /** The last work queued per key; a key leaves once its queue is empty. */
  private readonly tails = new Map<string, Promise<void>>();

  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key);
    // Each waits for the one before it, whatever that one's outcome (`tail` never rejects); work
    // that throws at once rejects its own promise.
    const result = (previous ?? Promise.resolve()).then(work);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }

  /** Keys with work queued or running. */
  get size(): number {
    return this.tails.size;
  }
}
