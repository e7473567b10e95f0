/**
 * `npm run bench:scale`: what distributed mode costs per operation and how far one
 * projector goes.
 * 1. Round trips per operation, counted at the clients on the stack's stand-ins
 *    (bench/scale-round-trips.ts).
 * 2. Projector throughput against the memory read store with a simulated round-trip time
 *    per call (bench/scale-projector.ts).
 * 3. Redis memory per online hub: its expiry job and a tunnel room (bench/scale-redis-memory.ts).
 * BENCH_PARTS=round-trips,projector,redis-memory chooses the parts (all by default).
 */
import { measureProjector, projectorTable } from './scale-projector';
import { measureRedisMemory, redisMemoryTable } from './scale-redis-memory';
import { measureRoundTrips, roundTripTable } from './scale-round-trips';

const PARTS = (process.env.BENCH_PARTS ?? 'round-trips,projector,redis-memory').split(',').map((p) => p.trim());

async function main(): Promise<void> {
  const stamp = new Date().toISOString();
  if (PARTS.includes('round-trips')) {
    const results = await measureRoundTrips();
    process.stdout.write(`\n## Round trips per operation (distributed, stand-ins), ${stamp}\n\n${roundTripTable(results)}\n`);
  }
  if (PARTS.includes('projector')) {
    const runs = await measureProjector();
    process.stdout.write(`\n## Projector throughput under a simulated network, ${stamp}\n\n${projectorTable(runs)}\n`);
  }
  if (PARTS.includes('redis-memory')) {
    const memory = await measureRedisMemory();
    process.stdout.write(`\n## Redis memory per online hub, ${stamp}\n\n${redisMemoryTable(memory)}\n`);
  }
}

main()
  .then(() => process.exit(0))
  .catch((error: unknown) => {
    process.stderr.write(`bench:scale failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
