/** How records become the port's RecordedEvent (positions are given as commit === prepare). */
import type { GlobalPosition, RecordedEvent } from '../port';
import { decodeEvent, type RawRecord } from './record-format';

export function positionAt(position: number): GlobalPosition {
  const value = BigInt(position);
  return { commit: value, prepare: value };
}

export function toRecordedEvent(record: RawRecord): RecordedEvent {
  const event = decodeEvent(record);
  return {
    id: event.id,
    streamName: record.streamName,
    revision: BigInt(record.revision),
    position: positionAt(record.position),
    type: event.type,
    data: event.data,
    metadata: event.metadata,
  };
}
