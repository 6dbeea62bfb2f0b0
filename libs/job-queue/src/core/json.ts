import { JobQueueError, type JobQueueErrorCode } from './errors';

/** The default of the `maxJsonBytes` option: the largest payload or result, as JSON text. */
export const DEFAULT_MAX_JSON_BYTES = 1_048_576;

/**
 * The largest `maxJsonBytes` allowed (32 MiB), and the most JSON text, in characters, that one
 * release flush carries (`FLUSH_MAX_CHARS` in worker/release-batcher.ts). One number for
 * both: a result over the flush's cap goes alone in its flush, and must still fit one jsonb
 * value (256 MiB); a result of at most this many bytes has at most this many characters, so it
 * does. A larger limit let a result through that no flush could write, and that flush, first
 * in line, held up every later release of the worker for ever.
 */
export const MAX_JSON_BYTES_LIMIT = 32 * 1_048_576;

/**
 * A value as the JSON text a jsonb column stores, refusing what JSON cannot carry (circular
 * structures, BigInt, a function), what jsonb refuses (the character U+0000), and text over
 * `maxBytes` bytes: `notJson` or `tooLarge` errors, naming `what`. `undefined` is `ifUndefined`.
 */
export function toJsonText(
  value: unknown,
  what: string,
  maxBytes: number,
  codes: { notJson: JobQueueErrorCode; tooLarge: JobQueueErrorCode },
  ifUndefined: string,
): string {
  if (value === undefined) return ifUndefined;
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    throw new JobQueueError(codes.notJson, `${what} cannot be serialised to JSON: ${(error as Error).message}`);
  }
  if (json === undefined) throw new JobQueueError(codes.notJson, `${what} cannot be serialised to JSON (got a ${typeof value})`);
  // JSON.stringify writes U+0000 and lone UTF-16 surrogates (half of a character, as a string
  // cut in the middle of an emoji leaves) as escapes, which jsonb rejects: an escape is one
  // preceded by an even number of backslashes.
  const escape = /(?:^|[^\\])(?:\\\\)*\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})/.exec(json);
  if (escape) {
    throw new JobQueueError(
      codes.notJson,
      escape[1] === '0000'
        ? `${what} contains the character U+0000, which PostgreSQL's jsonb cannot store`
        : `${what} contains a lone UTF-16 surrogate (\\u${escape[1]}: half of a character, as a string cut inside an emoji), which PostgreSQL's jsonb cannot store`,
    );
  }
  // Over the limit in characters means over it in bytes too; only text near it needs counting.
  if (json.length > maxBytes / 3 && Buffer.byteLength(json) > maxBytes) {
    throw new JobQueueError(codes.tooLarge, `${what} is ${Buffer.byteLength(json)} bytes of JSON, over the limit of ${maxBytes}`);
  }
  return json;
}

/** The most a progress object may take, as JSON text. */
export const MAX_PROGRESS_BYTES = 4_096;

/** Checks what a handler passes to ctx.progress(): a number from 0 to 100, or a small plain object. Returns its JSON text. */
export function progressToJson(value: unknown): string {
  const refuse = (got: string) => new JobQueueError('JQ_INVALID_PROGRESS', `progress must be a number from 0 to 100 or a JSON object, got ${got}`);
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0 || value > 100) throw refuse(String(value));
    return JSON.stringify(value);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw refuse(Array.isArray(value) ? 'an array' : String(value));
  const json = toJsonText(value, 'progress', MAX_PROGRESS_BYTES, { notJson: 'JQ_INVALID_PROGRESS', tooLarge: 'JQ_INVALID_PROGRESS' }, 'null');
  // What JSON makes of it counts: a Date, or an object with toJSON, may become a string or a number.
  if (!json.startsWith('{')) throw refuse(json.slice(0, 40));
  return json;
}
