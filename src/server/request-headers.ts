/**
 * What a request's headers say about how it is served (shared by the generation and embeddings routes): the DP rank
 * it pins (`X-data-parallel-rank`, pin.ts), its priority band within its tenant's ceiling (priority-band.ts) and its
 * own queue deadline (`x-gateway-queue-timeout-ms`).
 */
import type { FastifyRequest } from 'fastify';
import type { RouteContext } from './route-context.js';
import { DP_RANK_HEADER, parseDpRankHeader } from './pin.js';
import {
  PRIORITY_BAND_HEADER,
  QUEUE_TIMEOUT_HEADER,
  parsePriorityBand,
  parseQueueTimeout,
  type PriorityBand,
} from './priority-band.js';
import type { TenantPolicy } from './keys-file.js';

/** The serving facts of a request's headers (see the module comment). */
export interface RequestHeaderFacts {
  /** The pinned DP rank, or undefined for the engine client's own choice. */
  dpRank: number | undefined;
  band: PriorityBand;
  /** ms, or null for the group's deadline. */
  queueTimeoutMs: number | null;
}

/**
 * Read the request's headers for `policy` (its tenant's). Throws `ApiError` 400 for a malformed pin, band or
 * deadline header, 403 for a band above the tenant's ceiling (the parsers say which).
 */
export function requestHeaderFacts(
  ctx: RouteContext,
  request: FastifyRequest,
  policy: TenantPolicy,
): RequestHeaderFacts {
  const pinHeader = request.headers[DP_RANK_HEADER];
  return {
    dpRank: pinHeader === undefined ? undefined : parseDpRankHeader(pinHeader, ctx.chooser.validRanks()),
    band: parsePriorityBand(request.headers[PRIORITY_BAND_HEADER], policy.maxPriority, policy.priority),
    queueTimeoutMs: parseQueueTimeout(request.headers[QUEUE_TIMEOUT_HEADER]),
  };
}
