/**
 * The production build's last step (`npm run build`, after `tsc`): bundles the service into
 * one file, `dist/bundle/main.js`, and writes `dist/main.js`, the entry point people run,
 * which enables source maps and loads the bundle.
 *
 * Why: a start spends much of its loading time in Node's module loader, resolving and
 * reading some 900 files one by one; one file cuts the CPU of loading the code by about a
 * third (bench/README.md, "Crash start"). Left outside the bundle, loaded from
 * `node_modules` as before: native bindings, packages that read their own files, and the
 * drivers only distributed mode loads (with a dynamic `import()`, so embedded mode never
 * does).
 *
 * Stack traces keep pointing at `src/`: the source map maps the service's own code only
 * (the packages' mappings are left out, which keeps the map small enough to load at start
 * for little).
 */
import { build } from 'esbuild';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const ROOT = join(__dirname, '..');
const DIST = join(ROOT, 'dist');
const BUNDLE = join(DIST, 'bundle', 'main.js');

/** Loaded from node_modules at run time, never bundled. */
export const EXTERNAL = [
  // Native bindings.
  '@node-rs/argon2',
  'fs-native-extensions',
  // Serves its own files (require.resolve of its directory).
  'swagger-ui-dist',
  // Loaded on first use: distributed mode only, or the first mail.
  'bullmq',
  'mongodb',
  '@eventstore/db-client',
  'ioredis',
  '@socket.io/redis-adapter',
  'nodemailer',
];

const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** Source map `mappings` (base64 VLQ) → per generated line, segments of absolute values. */
function decodeMappings(mappings: string): number[][][] {
  const lines: number[][][] = [];
  const state = [0, 0, 0, 0, 0];
  for (const line of mappings.split(';')) {
    const segments: number[][] = [];
    state[0] = 0;
    for (const text of line.split(',')) {
      if (text === '') continue;
      const fields: number[] = [];
      let value = 0;
      let shift = 0;
      for (const char of text) {
        const digit = BASE64.indexOf(char);
        value += (digit & 31) << shift;
        if ((digit & 32) !== 0) {
          shift += 5;
          continue;
        }
        const field = fields.length;
        const delta = (value & 1) === 1 ? -(value >>> 1) : value >>> 1;
        state[field] = (state[field] ?? 0) + delta;
        fields.push(state[field] ?? 0);
        value = 0;
        shift = 0;
      }
      segments.push(fields);
    }
    lines.push(segments);
  }
  return lines;
}

function encodeValue(value: number): string {
  let rest = value < 0 ? (-value << 1) | 1 : value << 1;
  let text = '';
  do {
    let digit = rest & 31;
    rest >>>= 5;
    if (rest > 0) digit |= 32;
    text += BASE64[digit];
  } while (rest > 0);
  return text;
}

function encodeMappings(lines: readonly (readonly (readonly number[])[])[]): string {
  const state = [0, 0, 0, 0, 0];
  return lines
    .map((segments) => {
      state[0] = 0;
      return segments
        .map((fields) =>
          fields
            .map((value, field) => {
              const text = encodeValue(value - (state[field] ?? 0));
              state[field] = value;
              return text;
            })
            .join(''),
        )
        .join(',');
    })
    .join(';');
}

interface SourceMap {
  version: number;
  sources: string[];
  names: string[];
  mappings: string;
  sourcesContent?: unknown;
}

/** Keeps the mappings into `keep` sources only (generated code of the others maps to nothing). */
export function onlySources(map: SourceMap, keep: (source: string) => boolean): SourceMap {
  const renumbered = new Map<number, number>();
  const sources: string[] = [];
  map.sources.forEach((source, index) => {
    if (!keep(source)) return;
    renumbered.set(index, sources.length);
    sources.push(source);
  });
  const lines = decodeMappings(map.mappings).map((segments) =>
    segments.flatMap((fields) => {
      if (fields.length === 1) return [];
      const source = renumbered.get(fields[1] ?? -1);
      return source === undefined ? [] : [[fields[0] ?? 0, source, ...fields.slice(2)]];
    }),
  );
  return { ...map, sources, mappings: encodeMappings(lines) };
}

async function main(): Promise<void> {
  await build({
    entryPoints: [join(ROOT, 'src', 'main.ts')],
    outfile: BUNDLE,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    sourcemap: 'linked',
    sourcesContent: false,
    // Less to read and to scan for the source map at start (a tenth of the loading time);
    // names are kept as written: stack traces, error names (`this.constructor.name`).
    minifyWhitespace: true,
    keepNames: true,
    // `import()` of a package becomes `require()`, as tsc compiles it: the drivers load through
    // the CommonJS loader, exports and all, exactly as in the tests.
    supported: { 'dynamic-import': false },
    external: EXTERNAL,
    logLevel: 'warning',
  });
  const mapFile = `${BUNDLE}.map`;
  const map = JSON.parse(readFileSync(mapFile, 'utf8')) as SourceMap;
  writeFileSync(mapFile, JSON.stringify(onlySources(map, (source) => !source.includes('node_modules/'))));
  // tsc's dist/main.js gives way to the entry point that loads the bundle.
  rmSync(join(DIST, 'main.js.map'), { force: true });
  writeFileSync(
    join(DIST, 'main.js'),
    `'use strict';
// The service's entry point. The service itself is bundled into ${relative(DIST, BUNDLE)} by
// \`npm run build\` (scripts/bundle.ts); its stack traces map back to src/ through the source map.
process.setSourceMapsEnabled(true);
require('./${relative(DIST, BUNDLE)}');
`,
  );
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
