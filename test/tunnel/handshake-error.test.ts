import { handshakeError } from '../../src/tunnel/connection';

test('a refused handshake carries its message and data, and no stack frames', () => {
  const error = handshakeError('rate_limited', 'Too many handshakes');
  expect(error).toBeInstanceOf(Error);
  expect(error.message).toBe('rate_limited');
  expect(error.data).toEqual({ message: 'Too many handshakes' });
  expect(error.stack ?? '').not.toMatch(/\n\s+at /);
});

test('the stack trace limit is as it was afterwards: other errors keep their stacks', () => {
  const before = Error.stackTraceLimit;
  handshakeError('unauthorized', 'x');
  expect(Error.stackTraceLimit).toBe(before);
  expect(new Error('other').stack).toMatch(/\n\s+at /);
});
