import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import { jsonBody } from '../../src/api/middleware';

/**
 * The body middleware: 415 for a body that is not JSON, the JSON parser for one that is, and
 * nothing at all for a request that announces no body.
 */

let server: Server;
let port: number;

beforeAll(async () => {
  const app = express();
  app.use(jsonBody(1024));
  app.all('/echo', (req, res) => {
    res.json({ body: (req.body as unknown) ?? null });
  });
  await new Promise<void>((resolve) => {
    server = app.listen(0, '127.0.0.1', () => resolve());
  });
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

async function send(method: string, headers: Record<string, string>, body?: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/echo', method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as unknown }));
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

describe('jsonBody', () => {
  test('a request without a body goes on untouched, whatever its Content-Type', async () => {
    expect(await send('GET', {})).toEqual({ status: 200, body: { body: null } });
    expect(await send('GET', { 'Content-Type': 'text/plain' })).toEqual({ status: 200, body: { body: null } });
  });

  test('a JSON body is parsed, whether its length is given or it comes chunked', async () => {
    expect(await send('POST', { 'Content-Type': 'application/json', 'Content-Length': '7' }, '{"a":1}')).toEqual({ status: 200, body: { body: { a: 1 } } });
    expect(await send('POST', { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' }, '[1,2]')).toEqual({ status: 200, body: { body: [1, 2] } });
  });

  test('a body that is not JSON is 415, chunked or not', async () => {
    const expected = { status: 415, body: { statusCode: 415, message: 'Content-Type must be application/json', error: 'Unsupported Media Type' } };
    expect(await send('POST', { 'Content-Type': 'text/plain', 'Content-Length': '5' }, 'hello')).toEqual(expected);
    expect(await send('POST', { 'Transfer-Encoding': 'chunked' }, 'hello')).toEqual(expected);
  });

  test('an announced empty body is handed to the JSON parser as before: {} when it says JSON, nothing otherwise', async () => {
    expect(await send('POST', { 'Content-Type': 'application/json', 'Content-Length': '0' })).toEqual({ status: 200, body: { body: {} } });
    expect(await send('POST', { 'Content-Length': '0' })).toEqual({ status: 200, body: { body: null } });
  });

});
