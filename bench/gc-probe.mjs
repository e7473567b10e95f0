/**
 * Preloaded into the service by `npm run bench:storm` when BENCH_GC=1 (with `--expose-gc`):
 * on SIGWINCH it runs full garbage collections and writes `process.memoryUsage()` after them
 * to `memory-after-gc.json` in its working directory. Bench only: the service has no such hook.
 */
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import process from 'node:process';

process.on('SIGWINCH', () => {
  const collect = globalThis.gc;
  if (typeof collect !== 'function') return;
  // Twice: what the first one freed may let the second free more (weak references, finalizers).
  collect();
  collect();
  const file = join(process.cwd(), 'memory-after-gc.json');
  writeFileSync(`${file}.tmp`, JSON.stringify({ at: Date.now(), ...process.memoryUsage() }));
  renameSync(`${file}.tmp`, file);
});
