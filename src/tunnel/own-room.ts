/** The part of a Socket.IO adapter (the in-memory one, or Redis's) every join goes through. */
interface JoiningAdapter {
  addAll(id: string, rooms: Set<string>): Promise<void> | void;
}

/**
 * Socket.IO puts every socket in a room of its own, named by its id, so that it can be reached
 * with `to(socket.id)`: a Set, and an entry in the adapter's rooms, for every connection (about
 * 220 bytes of an idle hub). The tunnel reaches sockets only through its device and subscriber
 * rooms, never by a socket's id (no `to(id)`, no `except(id)`, no `socket.broadcast`, which
 * leaves the sender out through that room): the adapter is not asked to make it. A socket's
 * other rooms, and the adapter's index of them, are as before.
 */
export function withoutOwnRooms(adapter: JoiningAdapter): void {
  const addAll = adapter.addAll.bind(adapter);
  adapter.addAll = (id, rooms) => {
    if (!rooms.has(id)) return addAll(id, rooms);
    const others = new Set(rooms);
    others.delete(id);
    return addAll(id, others);
  };
}
