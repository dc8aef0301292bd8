/**
 * OpenAI's rate-limit response headers from a tenant's budget (engine-client/budgets.ts; issue 30 part 4):
 * `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests` and the same three for
 * tokens, on every answer of a tenant with a budget (a 429 `rate_limit_exceeded` included). A kind the tenant has no
 * limit for gets no headers. Reset times are written as OpenAI writes them (`1s`, `6m0s`, `17ms`).
 */
import { formatResetMs, type BudgetSnapshot, type LimitState } from '../engine-client/budgets.js';

/** The headers of `snapshot` (lower-case names; values as strings). */
export function rateLimitHeaders(snapshot: BudgetSnapshot): Record<string, string> {
  const headers: Record<string, string> = {};
  const add = (kind: 'requests' | 'tokens', l: LimitState | null) => {
    if (l === null) return;
    headers[`x-ratelimit-limit-${kind}`] = String(l.limit);
    headers[`x-ratelimit-remaining-${kind}`] = String(l.remaining);
    headers[`x-ratelimit-reset-${kind}`] = formatResetMs(l.resetMs);
  };
  add('requests', snapshot.requests);
  add('tokens', snapshot.tokens);
  return headers;
}
