/**
 * Contract faults a simulated rank can be told to commit, for tests of the gateway's checks on engine output (issue 26
 * part 4; src/engine-client/output-contract.ts). Off unless asked for (`sim --fault-…`); no real engine is meant to
 * do any of this.
 * - `overrunTokens`: the rank runs every request that many tokens past its `max_new_tokens` (TokenSpeed) or
 *   `max_tokens` (vLLM), as an engine that ignores the limit would (the context clamp still applies). The gateway
 *   must stop its client at the limit and ABORT the rest.
 * - `badTokenId` at `badTokenAt`: the `badTokenAt`-th token (1-based) each request generates is `badTokenId` instead
 *   of the sampled one (with its logprob), e.g. an id outside the tokenizer's vocabulary. The gateway must fail the
 *   request as the engine's fault.
 * - `undecodableOutput`: every output message the rank pushes is bytes neither wire decodes (`UNDECODABLE_OUTPUT`),
 *   as an engine whose wire version the gateway does not speak would send (issue 26 part 3). The gateway must blame
 *   that rank alone, never the group.
 */
import type { SampledToken, SimRequest, TokenSource } from './scheduler.js';

/** See the module docs. Units: tokens; `badTokenAt` ≥ 1. */
export interface SimFaults {
  overrunTokens?: number;
  badTokenId?: number;
  badTokenAt?: number;
  undecodableOutput?: boolean;
}

/** What a rank with `undecodableOutput` pushes instead of each output message: 0xc1, a byte msgpack never uses. */
export const UNDECODABLE_OUTPUT: readonly Uint8Array[] = Object.freeze([Uint8Array.of(0xc1)]);

/** `spec` as a rank with `faults` runs it: the same object when there are none, else a changed copy. */
export function withFaults(spec: SimRequest, faults: SimFaults | undefined): SimRequest {
  if (faults === undefined) return spec;
  const overrun = faults.overrunTokens ?? 0;
  const badId = faults.badTokenId;
  if (overrun === 0 && badId === undefined) return spec;
  const out: SimRequest = { ...spec };
  if (overrun > 0 && spec.maxNewTokens !== null) out.maxNewTokens = spec.maxNewTokens + overrun;
  if (badId !== undefined) out.tokens = replaceNth(spec.tokens, faults.badTokenAt ?? 1, badId);
  return out;
}

/** A source whose `n`-th token (1-based) is `tokenId`, the rest `source`'s (which is still drawn from for it). */
function replaceNth(source: TokenSource, n: number, tokenId: number): TokenSource {
  let drawn = 0;
  return {
    next(ctx): SampledToken {
      const tok = source.next(ctx);
      drawn++;
      return drawn === n ? { tokenId, logprob: tok.logprob } : tok;
    },
  };
}
