import { createTimerExpiryScheduler } from '../../src/presence/timer-scheduler';
import { expirySchedulerContract } from './expiry-scheduler.contract';

expirySchedulerContract('in-process timers', async () => {
  const scheduler = createTimerExpiryScheduler();
  return { scheduler, cleanup: () => scheduler.close() };
});
