import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/logger';
import { startService } from '../../src/service';

/**
 * A child process for test/runtime/loaded-packages.test.ts: starts the service from the
 * environment (as `src/main.ts` does), prints one JSON line with the npm packages the
 * process has loaded once it serves (`require.cache`), then stops it.
 */

/** `…/node_modules/@scope/name/…` → `@scope/name`; the last node_modules of the path counts. */
export function packageOf(file: string): string | null {
  const match = /.*node_modules[\\/]((?:@[^\\/]+[\\/])?[^\\/]+)/.exec(file);
  return match?.[1]?.replace('\\', '/') ?? null;
}

async function main(): Promise<void> {
  const service = await startService(loadConfig(), createLogger('warn'));
  const packages = [...new Set(Object.keys(require.cache).map(packageOf))].filter((name): name is string => name !== null).sort();
  process.stdout.write(`${JSON.stringify({ packages })}\n`);
  await service.stop();
  process.exit(0);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
