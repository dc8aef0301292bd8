/**
 * Priority bands (issue 30 part 2): how urgent a request is, named as the Gateway API Inference Extension names its
 * objectives' criticality (llm-d / GIE flow control: critical before standard before sheddable). A client names its
 * band in the `x-gateway-inference-objective` header (GIE's header, whose value names an objective; here the
 * objective is its band). A client may lower its request below its tenant's ceiling but never raise it above: the
 * ceiling is `standard` unless the keys file gives the tenant another (keys-file.ts), so `critical` needs a tenant
 * allowed to use it.
 *
 * On vLLM groups the band also sets the request's wire `priority` (EngineCoreRequest element 13; lower is served
 * first by an engine started with `--scheduling-policy priority`, vLLM `v1/core/sched/request_queue.py`): critical −1,
 * standard 0 (what every request carried before), sheddable 1. An FCFS engine ignores the field. TokenSpeed's wire
 * has no priority.
 */
import { bandOrder, DEFAULT_PRIORITY_BAND, PRIORITY_BANDS, type PriorityBand } from '../engine-client/flow-control.js';
import { ApiError, badRequest, quoteValue } from './errors.js';

export { bandOrder, DEFAULT_PRIORITY_BAND, PRIORITY_BANDS, type PriorityBand };

/** The request header naming the band (Node lower-cases incoming header names). */
export const PRIORITY_BAND_HEADER = 'x-gateway-inference-objective';

/** Whether `value` is a band name. */
export function isPriorityBand(value: unknown): value is PriorityBand {
  return (PRIORITY_BANDS as readonly unknown[]).includes(value);
}

/** The vLLM wire `priority` of a band: its order relative to the default band (critical −1, standard 0, sheddable 1). */
export function vllmPriorityOf(band: PriorityBand): number {
  return bandOrder(band) - bandOrder(DEFAULT_PRIORITY_BAND);
}

/**
 * The band of a request from its header `value` (absent or empty: `fallback`), allowed up to `ceiling`.
 * @throws ApiError 400 (`invalid_priority_band`) for a value that names no band; 403 (`priority_not_allowed`) for a
 *   band more urgent than `ceiling`.
 */
export function parsePriorityBand(
  value: string | string[] | undefined,
  ceiling: PriorityBand = DEFAULT_PRIORITY_BAND,
  fallback: PriorityBand = DEFAULT_PRIORITY_BAND,
): PriorityBand {
  // A header sent twice arrives joined with ', ': the same band twice is that band.
  const parts = (Array.isArray(value) ? value.join(',') : (value ?? '')).split(',').map((p) => p.trim().toLowerCase());
  const raw = parts.every((p) => p === parts[0]) ? parts[0]! : parts.join(', ');
  if (raw === '') return bandOrder(fallback) < bandOrder(ceiling) ? ceiling : fallback;
  if (!isPriorityBand(raw)) {
    throw badRequest(
      `${PRIORITY_BAND_HEADER} must be one of ${PRIORITY_BANDS.join(', ')}; got ${quoteValue(raw)}`,
      PRIORITY_BAND_HEADER,
      'invalid_priority_band',
    );
  }
  if (bandOrder(raw) < bandOrder(ceiling)) {
    throw new ApiError(
      403,
      `priority band '${raw}' is above what this client may use ('${ceiling}' or lower: ${PRIORITY_BANDS.slice(bandOrder(ceiling)).join(', ')})`,
      { type: 'permission_error', param: PRIORITY_BAND_HEADER, code: 'priority_not_allowed' },
    );
  }
  return raw;
}

/**
 * The request header that shortens a request's wait in flow control's queue (ms; the gateway's `--queue-timeout-ms`
 * stays the longest wait: a larger value waits that long).
 */
export const QUEUE_TIMEOUT_HEADER = 'x-gateway-queue-timeout-ms';

/**
 * A request's own queue deadline from its header `value` (absent: null, the gateway's default applies).
 * @throws ApiError 400 (`invalid_queue_timeout`) unless it is an integer number of ms ≥ 1.
 */
export function parseQueueTimeout(value: string | string[] | undefined): number | null {
  if (value === undefined) return null;
  const raw = (Array.isArray(value) ? value[0]! : value).trim();
  const ms = /^\d{1,10}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(ms >= 1)) {
    throw badRequest(
      `${QUEUE_TIMEOUT_HEADER} must be a whole number of milliseconds ≥ 1; got ${quoteValue(raw)}`,
      QUEUE_TIMEOUT_HEADER,
      'invalid_queue_timeout',
    );
  }
  return ms;
}
