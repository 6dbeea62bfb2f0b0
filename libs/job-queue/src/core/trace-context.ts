/**
 * A W3C traceparent (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`) as the three
 * fixed-width columns `jobs` keeps it in (trace_id uuid, span_id bigint, trace_flags smallint;
 * see migration Operations1764000000000 for why not one jsonb column), and back.
 */

export interface TraceColumns {
  traceId: string;
  /** The span id as a signed 64-bit integer, in decimal (node-pg reads bigint as a string). */
  spanId: string;
  flags: number;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const TWO_64 = 1n << 64n;
const TWO_63 = 1n << 63n;

/** The columns of a carrier's traceparent, or null when it has none (or an invalid one). */
export function toTraceColumns(carrier: Record<string, string> | null): TraceColumns | null {
  const match = carrier?.traceparent ? TRACEPARENT.exec(carrier.traceparent) : null;
  if (!match || /^0+$/.test(match[1]) || /^0+$/.test(match[2])) return null;
  const [, trace, span, flags] = match;
  const unsigned = BigInt(`0x${span}`);
  return {
    traceId: `${trace.slice(0, 8)}-${trace.slice(8, 12)}-${trace.slice(12, 16)}-${trace.slice(16, 20)}-${trace.slice(20)}`,
    spanId: String(unsigned >= TWO_63 ? unsigned - TWO_64 : unsigned),
    flags: parseInt(flags, 16),
  };
}

/** The trace columns as statement parameters (trace id, span id, trace flags): nulls for none. */
export function traceValues(trace: TraceColumns | null): [string | null, string | null, number | null] {
  return trace ? [trace.traceId, trace.spanId, trace.flags] : [null, null, null];
}

/** The carrier (`{ traceparent }`) of a row's columns, or null when the row has no trace. */
export function fromTraceColumns(traceId: string | null | undefined, spanId: string | null | undefined, flags: number | null | undefined): Record<string, string> | null {
  if (!traceId || spanId == null) return null;
  const signed = BigInt(spanId);
  const span = (signed < 0n ? signed + TWO_64 : signed).toString(16).padStart(16, '0');
  return { traceparent: `00-${traceId.replace(/-/g, '')}-${span}-${(flags ?? 0).toString(16).padStart(2, '0')}` };
}
