import { History, type Operation } from './history';
import { checkServerErrors } from './invariants';
import { CLIENT_TIMEOUT, Possible } from './model';
import { emptyWorld } from './world';

/**
 * The chaos run's own reasoning, on hand-made histories: what an answer allows the service
 * to hold, and which 5xx answers are violations. (The run itself is `npm run chaos`.)
 */

function answered(history: History, status: number | null, startedAt = Date.now(), error = 'ECONNREFUSED'): Operation {
  const op = history.begin({ worker: 0, kind: 'rename-device', entity: 'device:x', method: 'PUT', path: '/devices/x', target: ':1', summary: '' });
  op.status = status;
  op.error = status === null ? error : null;
  (op as { startedAt: number }).startedAt = startedAt;
  op.endedAt = startedAt + 5;
  return op;
}

describe('what an answer allows', () => {
  test('a success allows only its value; a write without answer adds its value; a refusal changes nothing', () => {
    const history = new History();
    const name = new Possible('Hub');
    name.after(answered(history, null), 'A');
    expect(name.list()).toEqual(['Hub', 'A']);
    expect(name.certain()).toBeUndefined();
    name.after(answered(history, 200), 'B');
    expect(name.list()).toEqual(['B']);
    name.after(answered(history, 403), 'C');
    expect(name.allows('C')).toBe(false);
    expect(name.certain()).toBe('B');
  });

  test('a write the client stopped waiting for stays allowed after later successes (it may still be at work in the service)', () => {
    const history = new History();
    const link = new Possible<string | null>('editor');
    link.after(answered(history, null, Date.now(), CLIENT_TIMEOUT), null);
    link.after(answered(history, 200), 'editor');
    expect(link.list()).toEqual(['editor', null]);
    link.after(answered(history, 200), 'viewer');
    expect(link.list()).toEqual(['viewer', null]);
    // Refused connections never reached the service: they cannot land later.
    const name = new Possible('Hub');
    name.after(answered(history, null), 'A');
    name.after(answered(history, 200), 'B');
    expect(name.list()).toEqual(['B']);
  });
});

describe('5xx answers', () => {
  test('a 503 during a fault (or its grace) is allowed; a 503 outside one, or any other 5xx, is a violation', () => {
    const history = new History();
    const fault = history.fault('kill-redis', 'redis');
    fault.recoveredAt = fault.at + 1000;
    answered(history, 503, fault.at + 500);
    answered(history, 503, fault.at + 1000 + 5000);
    const late = answered(history, 503, fault.at + 1000 + 60_000);
    const crash = answered(history, 500, fault.at + 200);
    const world = emptyWorld();
    checkServerErrors(world, history, 10_000);
    expect(world.violations.map((v) => v.message.split(':')[0])).toEqual([
      `${late.method} ${late.path} answered 503 outside any outage`,
      `${crash.method} ${crash.path} answered 500`,
    ]);
  });
});
