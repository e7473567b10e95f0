import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';

/** Runs `work` under the V8 profiler of this process when `dir` is set, writing `<dir>/<name>.cpuprofile`. */
export async function profiled<T>(dir: string | undefined, name: string, work: () => Promise<T>): Promise<T> {
  if (dir === undefined) return work();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await work();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(join(dir, `${name}.cpuprofile`), JSON.stringify(profile));
    session.disconnect();
  }
}
