import { CommanderError } from 'commander';
import { JobQueueError, type JobQueueErrorCode } from '../core/errors';

/** What the bin prints for an error: one line, `CODE: message`, no stack. */
export interface Failure {
  code: JobQueueErrorCode;
  message: string;
}

/** Node's codes for a server that cannot be reached (refused, unknown host, no route, timed out, dropped). */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNRESET', 'EPIPE']);
/** SQLSTATEs of a server that answers but will not take this login. */
const LOGIN_STATES = new Set(['28000', '28P01', '3D000']);
/** SQLSTATEs of a server that answers but takes no connection now (starting, shutting down, full). */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300']);
/** SQLSTATEs of a schema older than this version: a table, column or function it reads is missing. */
const OUTDATED_STATES = new Set(['42P01', '42703', '42883', '3F000']);

/**
 * Turns whatever a command threw into one line with a JQ_* code: the library's own errors
 * keep theirs; commander's usage errors are JQ_BAD_USAGE; pg's errors are told apart by their
 * SQLSTATE or Node's network code. `target` names the server without its password.
 */
export function toFailure(error: unknown, target?: string): Failure {
  if (error instanceof JobQueueError) return { code: error.code, message: oneLine(error.detail) };
  if (error instanceof CommanderError) return { code: 'JQ_BAD_USAGE', message: oneLine(error.message.replace(/^error: /, '')) };
  const where = target ? ` at ${target}` : '';
  const network = networkCode(error);
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  const text = oneLine(typeof message === 'string' && message ? message : String(error));
  if (network) return { code: 'JQ_DB_UNREACHABLE', message: `cannot reach PostgreSQL${where} (${network}): is the server up, and the host and port right?` };
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    if (LOGIN_STATES.has(code)) return { code: 'JQ_DB_LOGIN_FAILED', message: `PostgreSQL${where} refused the login: ${text} (SQLSTATE ${code})` };
    if (UNAVAILABLE_STATES.has(code)) return { code: 'JQ_DB_UNREACHABLE', message: `PostgreSQL${where} takes no connection now: ${text} (SQLSTATE ${code})` };
    if (OUTDATED_STATES.has(code)) {
      return { code: 'JQ_SCHEMA_OUTDATED', message: `${text} (SQLSTATE ${code}): the schema is older than this version; run \`nestjs-job-queue validate\`, then \`migrate\`` };
    }
    return { code: 'JQ_DB_ERROR', message: `${text} (SQLSTATE ${code})` };
  }
  // pg's own words for a connection that timed out, or that ended under a running command
  if (/^(timeout expired|connection terminated)/i.test(text)) return { code: 'JQ_DB_UNREACHABLE', message: `the connection to PostgreSQL${where} ended: ${text}` };
  return { code: 'JQ_INTERNAL', message: text };
}

/**
 * An error while connecting: what toFailure makes of it, and anything it cannot place (TLS,
 * a certificate, a protocol error) is a connection problem too, not a bug.
 */
export function toConnectFailure(error: unknown, target: string): JobQueueError {
  const failure = toFailure(error, target);
  if (failure.code === 'JQ_INTERNAL') return new JobQueueError('JQ_DB_UNREACHABLE', `cannot connect to PostgreSQL at ${target}: ${failure.message}`);
  return new JobQueueError(failure.code, failure.message);
}

/** Node's network error code, also inside an AggregateError (a host name with several addresses, each refused). */
function networkCode(error: unknown): string | undefined {
  const { code, errors } = (error ?? {}) as { code?: unknown; errors?: unknown };
  if (typeof code === 'string' && NETWORK_CODES.has(code)) return code;
  if (Array.isArray(errors)) return errors.map(networkCode).find((found) => found !== undefined);
  return undefined;
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}
