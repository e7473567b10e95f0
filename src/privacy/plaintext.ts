import { ERASED, PERSONAL_FIELDS, SEALED_FIELD, getPath, setPath, subjectOf } from './personal-fields';

/**
 * Events written by releases before personal fields were sealed (schema version 1) hold those
 * fields in the clear, where destroying a key cannot reach them. An erasure therefore also
 * looks at the person's streams for such events: the embedded log rewrites them on disk with
 * those fields "[erased]" (compaction of the segments holding them: ids, types, revisions,
 * positions, metadata and every other field kept), so they read exactly as a shredded version 2
 * event; EventStoreDB cannot rewrite an event in place, so there they are reported (README,
 * "Personal data").
 */

/** Whose data an erasure destroys, and the streams that may hold it. */
export interface ErasedPerson {
  /** `user:<id>` and `device:<uuid>` of the devices deleted with them. */
  readonly subjects: readonly string[];
  /** Their user stream, their sessions' streams and the streams of the devices deleted with them. */
  readonly streams: readonly string[];
}

export interface PlaintextReport {
  /** Events rewritten with their personal fields erased. */
  readonly rewritten: number;
  /** Streams still holding personal fields of the person in the clear (none in embedded mode). */
  readonly left: readonly string[];
  readonly leftEvents: number;
}

/** Finds (and, where the store can, rewrites) what `erased` left in the clear. */
export type PlaintextEraser = (erased: ErasedPerson) => Promise<PlaintextReport>;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The stored data of an event with the personal fields of an erased subject set to "[erased]",
 * or null when it holds none of theirs in the clear (sealed, another subject's, none at all).
 */
export function redactedPlaintext(type: string, streamName: string, data: unknown, subjects: ReadonlySet<string>): Record<string, unknown> | null {
  const paths = PERSONAL_FIELDS[type];
  if (paths === undefined || !isRecord(data) || SEALED_FIELD in data) return null;
  const subject = subjectOf(type, streamName, data);
  if (subject === null || !subjects.has(subject)) return null;
  let redacted: Record<string, unknown> = data;
  for (const path of paths) {
    const value = getPath(data, path);
    if (value !== undefined && value !== ERASED) redacted = setPath(redacted, path, ERASED);
  }
  return redacted === data ? null : redacted;
}
