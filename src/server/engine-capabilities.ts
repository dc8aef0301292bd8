/**
 * What each engine family can serve of a request's output options, for choosing among engine groups (groups.ts):
 * a request needing something a group's engine cannot express only goes to groups that can, and to none → 400
 * naming the limit (gateway.md 8: TokenSpeed has no top-k logprobs, no choice/JSON-object field and none of vLLM's
 * structured-output options; the two it lacks as fields have exact equivalents, see tokenspeed/sampling.ts).
 */
import { tokenSpeedStructuredOutputProblem } from '../protocols/tokenspeed/sampling.js';
import type { StructuredOutput } from '../protocols/types.js';
import type { BackendGroup, EngineFamily } from './backend.js';
import { badRequest, type ApiError } from './errors.js';

/** The output options of a request that not every engine serves. */
export interface OutputNeeds {
  /** Requested top-logprob count, or null when logprobs are not requested. */
  topLogprobs: number | null;
  /** The logprob parameter's name (`top_logprobs` on chat, `logprobs` on completions). */
  logprobsParam: string;
  /** The structured-output constraint, or null. */
  structuredOutput: StructuredOutput | null;
  /** The parameter the constraint came from (for the error's `param`). */
  structuredOutputParam: string;
  /** Whether the request restricts the sampled ids (`allowed_token_ids`: vLLM's wire only). */
  allowedTokenIds: boolean;
  /** Whether the request forbids words (`bad_words`: vLLM's wire only). Absent: no. */
  badWords?: boolean;
}

/** The most top logprobs a TokenSpeed group returns: the sampled token's only (gateway.md 8). */
export const TOKENSPEED_MAX_TOP_LOGPROBS = 1;

/** Why an engine family cannot serve `needs` (the message and the parameter), or null when it can. */
export function capabilityProblem(engine: EngineFamily, needs: OutputNeeds): { message: string; param: string } | null {
  if (engine !== 'tokenspeed') return null;
  if (needs.allowedTokenIds) {
    return {
      message: `'allowed_token_ids' cannot be served on TokenSpeed engine groups: TokenSpeed's request has no such field`,
      param: 'allowed_token_ids',
    };
  }
  if (needs.badWords === true) {
    return {
      message: `'bad_words' cannot be served on TokenSpeed engine groups: TokenSpeed's request has no such field`,
      param: 'bad_words',
    };
  }
  if (needs.topLogprobs !== null && needs.topLogprobs > TOKENSPEED_MAX_TOP_LOGPROBS) {
    return {
      message: `'${needs.logprobsParam}' must be at most ${TOKENSPEED_MAX_TOP_LOGPROBS} on TokenSpeed engine groups: TokenSpeed returns only the sampled token's logprob (got ${needs.topLogprobs})`,
      param: needs.logprobsParam,
    };
  }
  if (needs.structuredOutput !== null) {
    const problem = tokenSpeedStructuredOutputProblem(needs.structuredOutput);
    if (problem !== null)
      return {
        message: `'${needs.structuredOutputParam}' cannot be served: ${problem}`,
        param: needs.structuredOutputParam,
      };
  }
  return null;
}

/**
 * The groups of `groups` that can serve `needs`. Throws `ApiError` 400 (`unsupported_parameter`, naming the
 * parameter and the limit) when none can.
 */
export function capableGroups(groups: readonly BackendGroup[], needs: OutputNeeds): BackendGroup[] {
  const ok = groups.filter((g) => capabilityProblem(g.engine, needs) === null);
  if (ok.length > 0) return ok;
  const first = capabilityProblem(groups[0]!.engine, needs)!;
  throw capabilityError(first);
}

function capabilityError(p: { message: string; param: string }): ApiError {
  return badRequest(p.message, p.param, 'unsupported_parameter');
}
