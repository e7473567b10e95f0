import { SmallSetsMap } from './small-collections';

/** The parts of a Socket.IO adapter (the in-memory one, or Redis's, built on it) a socket's rooms live in. */
interface RoomsAdapter {
  addAll(id: string, rooms: Set<string>): Promise<void> | void;
  rooms: Map<string, Set<string>>;
  sids: Map<string, Set<string>>;
}

/**
 * What the adapter keeps of a connection's rooms, made leaner (about 500 bytes of an idle hub),
 * before any socket joins one:
 *
 * - Socket.IO puts every socket in a room of its own, named by its id, so that it can be
 *   reached with `to(socket.id)`: a Set, and an entry in the adapter's rooms, for every
 *   connection. The tunnel reaches sockets only through its device and subscriber rooms, never
 *   by a socket's id (no `to(id)`, no `except(id)`, no `socket.broadcast`, which leaves the
 *   sender out through that room): the adapter is not asked to make it.
 * - A room's members and a socket's rooms are Sets of about 200 bytes each, holding one member
 *   for a hub (its device room holds its socket; its socket is in that room only): they are
 *   `SmallSet`s (src/tunnel/small-collections.ts).
 *
 * A socket's other rooms, and the adapter's index of them, are as before.
 */
export function leanRooms(adapter: RoomsAdapter): void {
  if (adapter.rooms.size > 0 || adapter.sids.size > 0) throw new Error('leanRooms: the adapter has rooms already');
  adapter.rooms = new SmallSetsMap<string, string>();
  adapter.sids = new SmallSetsMap<string, string>();
  const addAll = adapter.addAll.bind(adapter);
  adapter.addAll = (id, rooms) => {
    if (!rooms.has(id)) return addAll(id, rooms);
    const others = new Set(rooms);
    others.delete(id);
    return addAll(id, others);
  };
}
