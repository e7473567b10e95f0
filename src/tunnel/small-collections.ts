/**
 * A Map for the maps Socket.IO keeps per connection that hold one entry or none for their
 * whole life: a `Client`'s sockets and namespaces (a hub joins one namespace) and a socket's
 * pending acknowledgements (the tunnel asks for none). A `Map` is about 180 bytes even empty
 * (its table has room for four entries); this keeps one entry in two fields and makes a
 * real `Map` only for a second entry. It answers what Socket.IO asks of those maps (`get`,
 * `set`, `has`, `delete`, `clear`, `size`, iteration) as a `Map` does, in insertion order.
 */
export class SmallMap<K, V> implements Map<K, V> {
  private key: K | undefined = undefined;
  private value: V | undefined = undefined;
  private held = false;
  /** Every entry, once there were two at the same time. */
  private many: Map<K, V> | null = null;

  /** A copy of `entries` (a Socket.IO map, once its entry is in place). */
  constructor(entries?: Iterable<readonly [K, V]>) {
    if (entries !== undefined) for (const [key, value] of entries) this.set(key, value);
  }

  get size(): number {
    return this.many !== null ? this.many.size : this.held ? 1 : 0;
  }

  get(key: K): V | undefined {
    if (this.many !== null) return this.many.get(key);
    return this.held && sameKey(this.key, key) ? this.value : undefined;
  }

  has(key: K): boolean {
    if (this.many !== null) return this.many.has(key);
    return this.held && sameKey(this.key, key);
  }

  set(key: K, value: V): this {
    if (this.many !== null) this.many.set(key, value);
    else if (!this.held || sameKey(this.key, key)) {
      // As a Map keeps it: -0 as 0.
      this.key = (Object.is(key, -0) ? 0 : key) as K;
      this.value = value;
      this.held = true;
    } else {
      this.many = new Map([[this.key as K, this.value as V]]);
      this.many.set(key, value);
      this.forgetOne();
    }
    return this;
  }

  delete(key: K): boolean {
    if (this.many !== null) return this.many.delete(key);
    if (!this.held || !sameKey(this.key, key)) return false;
    this.forgetOne();
    return true;
  }

  clear(): void {
    this.many = null;
    this.forgetOne();
  }

  forEach(callback: (value: V, key: K, map: Map<K, V>) => void, thisArg?: unknown): void {
    for (const [key, value] of this.entries()) callback.call(thisArg, value, key, this);
  }

  *entries(): MapIterator<[K, V]> {
    if (this.many !== null) {
      yield* this.many.entries();
      return;
    }
    // A `Map` iterated while its entry is deleted and set again yields the new one: read each step.
    if (this.held) yield [this.key as K, this.value as V];
  }

  *keys(): MapIterator<K> {
    for (const [key] of this.entries()) yield key;
  }

  *values(): MapIterator<V> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return 'Map';
  }

  private forgetOne(): void {
    this.key = undefined;
    this.value = undefined;
    this.held = false;
  }
}

/** `Map`'s own comparison of keys (SameValueZero: NaN is NaN, -0 is 0). */
const sameKey = (a: unknown, b: unknown): boolean => a === b || (a !== a && b !== b);

/**
 * A Set for the sets Socket.IO's adapter keeps per room and per socket, which in the tunnel
 * hold one member for their whole life (a hub's device room holds the hub's socket; the
 * hub's socket is in that room only): one member in two fields, a real `Set` only for a
 * second. It answers what the adapters ask of those sets (`add`, `has`, `delete`, `size`,
 * `forEach`, iteration) as a `Set` does, in insertion order.
 */
export class SmallSet<T> implements Set<T> {
  private member: T | undefined = undefined;
  private held = false;
  /** Every member, once there were two at the same time. */
  private many: Set<T> | null = null;

  get size(): number {
    return this.many !== null ? this.many.size : this.held ? 1 : 0;
  }

  has(value: T): boolean {
    if (this.many !== null) return this.many.has(value);
    return this.held && sameKey(this.member, value);
  }

  add(value: T): this {
    if (this.many !== null) this.many.add(value);
    else if (!this.held) {
      // As a Set keeps it: -0 as 0.
      this.member = (Object.is(value, -0) ? 0 : value) as T;
      this.held = true;
    } else if (!sameKey(this.member, value)) {
      this.many = new Set([this.member as T, value]);
      this.member = undefined;
      this.held = false;
    }
    return this;
  }

  delete(value: T): boolean {
    if (this.many !== null) return this.many.delete(value);
    if (!this.held || !sameKey(this.member, value)) return false;
    this.member = undefined;
    this.held = false;
    return true;
  }

  clear(): void {
    this.many = null;
    this.member = undefined;
    this.held = false;
  }

  forEach(callback: (value: T, again: T, set: Set<T>) => void, thisArg?: unknown): void {
    for (const value of this.values()) callback.call(thisArg, value, value, this);
  }

  *values(): SetIterator<T> {
    if (this.many !== null) {
      yield* this.many.values();
      return;
    }
    if (this.held) yield this.member as T;
  }

  keys(): SetIterator<T> {
    return this.values();
  }

  *entries(): SetIterator<[T, T]> {
    for (const value of this.values()) yield [value, value];
  }

  [Symbol.iterator](): SetIterator<T> {
    return this.values();
  }

  get [Symbol.toStringTag](): string {
    return 'Set';
  }
}

/**
 * The Map an adapter keeps its rooms (or each socket's rooms) in: a new, empty Set put in it
 * is kept as a `SmallSet` (the adapters make one with `new Set()` and add to it at once).
 */
export class SmallSetsMap<K, T> extends Map<K, Set<T>> {
  override set(key: K, value: Set<T>): this {
    return super.set(key, value instanceof Set && value.size === 0 ? new SmallSet<T>() : value);
  }
}
