/**
 * Generates the app client's REST types from the service's own OpenAPI document:
 *   npm run generate:app-client        writes clients/app/src/openapi.ts
 *   npm run generate:app-client -- --check   exits 1 when the file is stale (--file F: another file)
 * test/clients/app-client-types.test.ts runs the check, so a route change that breaks
 * apps breaks the build until the types are regenerated (and the client still type-checks).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import openapiTS, { astToString } from 'openapi-typescript';
import { createApp } from '../src/api/app';
import { buildOpenApiDocument } from '../src/api/routes/openapi';

// Every route module registers its documentation when the app is assembled.
void createApp;

export const APP_CLIENT_TYPES = join(__dirname, '..', 'clients', 'app', 'src', 'openapi.ts');

const HEADER = `/**
 * Generated from the service's OpenAPI document by \`npm run generate:app-client\`; do not edit.
 */
`;

export async function generateAppClientTypes(): Promise<string> {
  const document = buildOpenApiDocument() as unknown as Parameters<typeof openapiTS>[0];
  const ast = await openapiTS(document, { alphabetize: true });
  return HEADER + astToString(ast);
}

async function main(): Promise<void> {
  const generated = await generateAppClientTypes();
  const fileFlag = process.argv.indexOf('--file');
  const target = fileFlag > 0 ? (process.argv[fileFlag + 1] ?? APP_CLIENT_TYPES) : APP_CLIENT_TYPES;
  if (process.argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(target, 'utf8');
    } catch {
      // missing: stale
    }
    if (current !== generated) {
      process.stderr.write(`${target} is stale: run npm run generate:app-client\n`);
      process.exit(1);
    }
    process.stdout.write('app client types are up to date\n');
    return;
  }
  writeFileSync(target, generated);
  process.stdout.write(`wrote ${target}\n`);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
    process.exit(1);
  });
}
