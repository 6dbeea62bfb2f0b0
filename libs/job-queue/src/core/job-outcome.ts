/**
 * How an attempt ended. `completedInTransaction`: the job's completion was committed with the
 * handler's own transaction (job-transaction.ts), so there is nothing left to release.
 */
export type JobOutcome = { ok: true; result: unknown; completedInTransaction?: boolean } | { ok: false; error: unknown };

/** The longest error message kept, in characters: a flush carries its failures' messages in one jsonb (release-batcher.ts). */
export const MAX_ERROR_MESSAGE_CHARS = 65_536;

/** What is kept in last_error and errors[].message: text PostgreSQL can store, cut at MAX_ERROR_MESSAGE_CHARS. */
export function errorMessage(error: unknown): string {
  const message = describeError(error);
  return storableText(message.length > MAX_ERROR_MESSAGE_CHARS ? `${message.slice(0, MAX_ERROR_MESSAGE_CHARS - 1)}…` : message);
}

/** An error's own `code`, when it is a string (JQ_JOB_TIMEOUT, an app's own), for errors[].code. */
export function errorCode(error: unknown): string | null {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? storableText(code.slice(0, 200)) : null;
}

/**
 * Text that text and jsonb columns both take: no U+0000, and each lone UTF-16 surrogate (half
 * of a character, as a string cut inside an emoji leaves) made U+FFFD, as encoding it to UTF-8
 * would; in JSON it would be an escape that jsonb rejects (messages reach releaseJobs as jsonb).
 */
function storableText(text: string): string {
  return text.replace(/\u0000/g, '').replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
}

function describeError(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}
