import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';

/**
 * A uuid read back from the embedded log is one flat string. Joined from its five groups it was
 * a tree of nine strings (V8's cons strings, about 300 bytes instead of 56), and every device's
 * fold and read-model document keeps a dozen of them: ~3 KB per connected hub after a restart.
 * V8 tells a string's representation only to a process started with `--allow-natives-syntax`.
 */
test('a uuid decoded from a record is a flat one-byte string, equal to the one written', () => {
  const script = `
    const { ByteReader, ByteWriter, readValue, writeValue } = require(${JSON.stringify(resolve(__dirname, '../../src/infra/eventstore/embedded/value-codec.ts'))});
    const uuid = '0f8fad5b-d9cb-469f-a165-70867728950e';
    const out = new ByteWriter();
    writeValue(out, { id: uuid });
    const decoded = readValue(new ByteReader(Buffer.from(out.view())));
    if (decoded.id !== uuid) throw new Error('decoded ' + decoded.id);
    %DebugPrint(decoded.id);
  `;
  const printed = execFileSync(process.execPath, ['--allow-natives-syntax', '--require', 'tsx/cjs', '-e', script], { encoding: 'utf8', cwd: resolve(__dirname, '../..') });
  // Named ONE_BYTE_STRING_TYPE by Node 20's V8, SEQ_ONE_BYTE_STRING_TYPE by Node 24's.
  expect(printed).toMatch(/type: (SEQ_|INTERNALIZED_)?ONE_BYTE_STRING_TYPE/);
  expect(printed).not.toMatch(/CONS/);
});
