/**
 * The argon2id bindings `npm run bench:login` compares at the service's parameters, loaded by
 * name so that only the one the service uses has to be installed: the others are measured
 * when present: installed anywhere Node's `require` finds them, e.g. in a directory named by
 * NODE_PATH (`npm install --prefix /tmp/argon2-alt argon2@0.45.1 hash-wasm@4.13.0`, then
 * `NODE_PATH=/tmp/argon2-alt/node_modules npm run bench:login`), so the project's own
 * dependencies stay as they are.
 */

/** A CommonJS require: it looks in NODE_PATH too, which `import()` does not. */
const load = createRequire(__filename);
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { ARGON2_OPTIONS } from '../src/auth/passwords';

export interface Binding {
  readonly name: string;
  readonly version: string;
  /** True when a call computes on the calling thread (the event loop), not on a thread of the pool. */
  readonly blocksEventLoop: boolean;
  hash(password: string): Promise<string>;
  verify(hash: string, password: string): Promise<boolean>;
}

type Fn = (...args: unknown[]) => unknown;

function fn(module: unknown, name: string): Fn {
  const value: unknown = typeof module === 'object' && module !== null ? (module as Record<string, unknown>)[name] : undefined;
  if (typeof value !== 'function') throw new Error(`no function ${name}`);
  return value as Fn;
}

async function asString(value: unknown): Promise<string> {
  const resolved: unknown = await value;
  if (typeof resolved !== 'string') throw new Error('expected a string');
  return resolved;
}

async function asBoolean(value: unknown): Promise<boolean> {
  const resolved: unknown = await value;
  if (typeof resolved !== 'boolean') throw new Error('expected a boolean');
  return resolved;
}

function versionOf(name: string): string {
  const manifest: unknown = JSON.parse(readFileSync(load.resolve(`${name}/package.json`), 'utf8'));
  const version = typeof manifest === 'object' && manifest !== null ? (manifest as Record<string, unknown>).version : undefined;
  return typeof version === 'string' ? version : '?';
}

const { memoryCost, timeCost, parallelism } = ARGON2_OPTIONS;

const LOADERS: Readonly<Record<string, (module: unknown) => Omit<Binding, 'name' | 'version'>>> = {
  argon2: (module) => {
    const hash = fn(module, 'hash');
    const verify = fn(module, 'verify');
    const type = (module as Record<string, unknown>).argon2id;
    return {
      blocksEventLoop: false,
      hash: (password) => asString(hash(password, { type, memoryCost, timeCost, parallelism })),
      verify: (digest, password) => asBoolean(verify(digest, password)),
    };
  },
  '@node-rs/argon2': (module) => {
    const hash = fn(module, 'hash');
    const verify = fn(module, 'verify');
    return {
      blocksEventLoop: false,
      // Algorithm.Argon2id is a const enum (2) in its typings.
      hash: (password) => asString(hash(password, { algorithm: 2, memoryCost, timeCost, parallelism })),
      verify: (digest, password) => asBoolean(verify(digest, password)),
    };
  },
  'hash-wasm': (module) => {
    const hash = fn(module, 'argon2id');
    const verify = fn(module, 'argon2Verify');
    return {
      blocksEventLoop: true,
      hash: (password) =>
        asString(hash({ password, salt: randomBytes(16), parallelism, iterations: timeCost, memorySize: memoryCost, hashLength: 32, outputType: 'encoded' })),
      verify: (digest, password) => asBoolean(verify({ password, hash: digest })),
    };
  },
};

export const BINDING_NAMES = Object.keys(LOADERS);

/** The binding, or null when the package is not installed. */
export async function loadBinding(name: string): Promise<Binding | null> {
  const loader = LOADERS[name];
  if (loader === undefined) throw new Error(`unknown binding ${name}`);
  let module: unknown;
  try {
    module = load(name);
  } catch {
    return null;
  }
  return { name, version: versionOf(name), ...loader(module) };
}
