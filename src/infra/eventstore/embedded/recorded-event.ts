/** How records become the port's RecordedEvent (positions are given as commit === prepare). */
import { deepFreeze } from '../deep-freeze';
import type { GlobalPosition, RecordedEvent } from '../port';
import { decodeEvent, type RawRecord } from './record-format';

export function positionAt(position: number): GlobalPosition {
  const value = BigInt(position);
  return { commit: value, prepare: value };
}

/** The event a record holds, deep-frozen: it is shared by every reader of the record (LogReader.eventOf). */
export function toRecordedEvent(record: RawRecord): RecordedEvent {
  const event = decodeEvent(record);
  return deepFreeze({
    id: event.id,
    streamName: record.streamName,
    revision: BigInt(record.revision),
    position: positionAt(record.position),
    type: event.type,
    data: event.data,
    metadata: event.metadata,
  });
}
