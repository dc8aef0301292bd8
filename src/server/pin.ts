/**
 * `X-data-parallel-rank` request header (gateway.md section 14, after vLLM's `_get_data_parallel_rank`): pins the
 * request to one DP rank of the engine group.
 */
import { badRequest, quoteValue } from './errors.js';

/** The header name (Node lower-cases incoming header names, so matching is case-insensitive). */
export const DP_RANK_HEADER = 'x-data-parallel-rank';

/**
 * The pinned DP rank of a request, or undefined when the header is absent or empty.
 * The value must be a non-negative decimal integer equal to one of `ranks` (the DP ranks the engine groups have,
 * ready or not: whether the rank can take the request now is decided later, with a 503 when it cannot); anything
 * else throws `ApiError` 400 with `param: 'X-data-parallel-rank'` and a message naming the valid ranks.
 */
export function parseDpRankHeader(value: string | string[] | undefined, ranks: readonly number[]): number | undefined {
  if (value === undefined) return undefined;
  const raw = (Array.isArray(value) ? value.join(',') : value).trim();
  if (raw === '') return undefined;
  const valid = ranks.length > 0 ? `one of ${ranks.join(', ')}` : 'a DP rank, but no engine group has one';
  const rank = /^\d{1,9}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(rank) || !ranks.includes(rank)) {
    throw badRequest(
      `X-data-parallel-rank must be ${valid} (the DP ranks of the engine groups); got ${quoteValue(raw)}`,
      'X-data-parallel-rank',
      'invalid_dp_rank',
    );
  }
  return rank;
}
