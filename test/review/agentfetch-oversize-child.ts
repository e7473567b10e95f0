/**
 * agentFetch in a process of its own (test/review/agentfetch-process.test.ts): an answer over
 * maxBodyBytes that arrives whole (head and body in one read, as small answers do), then a
 * request answered normally, then close(). Prints each outcome; never calls process.exit: the
 * process must end by itself, and an error left unhandled would end it with a failure.
 */
import { createServer, type AddressInfo } from 'node:net';
import { agentFetch } from '../../clients/hub/src/http';

async function main(): Promise<void> {
  const big = `"${'x'.repeat(2046)}"`;
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      const body = chunk.toString('latin1').startsWith('POST /big ') ? big : '{"ok":true}';
      socket.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const http = agentFetch({ maxBodyBytes: 1024 });
  const init = { method: 'POST', headers: {}, body: '{}' };
  const over = await http(`${base}/big`, init).then(
    (res) => `answered ${res.status}`,
    (error: Error) => `refused: ${error.message}`,
  );
  console.log(`over the limit: ${over}`);
  const next = await http(`${base}/small`, init).then(
    async (res) => `answered ${res.status} ${JSON.stringify(await res.json())}`,
    (error: Error) => `refused: ${error.message}`,
  );
  console.log(`then: ${next}`);
  http.close();
  server.close();
}

void main();
