import Module from 'node:module';
import type { UserCommands } from '../../../src/commands/users';

/**
 * Loaded into a service process (`node --import tsx --import <this file> src/main.ts`): the
 * process kills itself with SIGKILL when an erasure is about to release the person's e-mail
 * reservation, i.e. right after `UserErased` was appended, as a kill -9 at that instant would.
 * The seam is the one the API role wires (`createUserCommands().releaseEmail`, handed to the
 * erasure commands); nothing in the service knows of this file.
 */

type UsersModule = typeof import('../../../src/commands/users');

const USERS_MODULE = /(^|[\\/])commands[\\/]users(\.ts)?$/;

function dying(users: UsersModule): UsersModule {
  return {
    ...users,
    createUserCommands: (deps) => {
      const commands: UserCommands = users.createUserCommands(deps);
      return {
        ...commands,
        releaseEmail: () => {
          process.kill(process.pid, 'SIGKILL');
          return new Promise<never>(() => undefined);
        },
      };
    },
  };
}

const load = Module.prototype.require;
let wrapped: UsersModule | null = null;
Module.prototype.require = function require(this: Module, id: string): unknown {
  const loaded: unknown = load.call(this, id);
  if (!USERS_MODULE.test(id)) return loaded;
  wrapped ??= dying(loaded as UsersModule);
  return wrapped;
} as typeof Module.prototype.require;
