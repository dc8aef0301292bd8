/**
 * The non-streaming answer of a generation request (issue 28 part 3): run every choice to its end, folding each event
 * into the accumulator (text appended in place where the choice is plain), then render the body in the endpoint's
 * shape and count the request. A client that leaves ends the run (every unfinished sub-request is aborted; 499).
 */
import type { FastifyReply } from 'fastify';
import type { ChoiceOutputs } from './choice-outputs.js';
import type { DisconnectWatch } from './disconnect.js';
import { ApiError, toApiError } from './errors.js';
import { ClientDisconnectedError } from './generation.js';
import { GenerationRun, type RunChoice } from './generation-run.js';
import { endDisconnected, type RequestRecord } from './request-record.js';
import type { ResponseBase, ResponseShape } from './response-shape.js';

/** What both responses (buffered here, streamed in respond-streamed.ts) answer from. */
export interface RespondParts {
  choices: readonly RunChoice[];
  outputs: ChoiceOutputs;
  record: RequestRecord;
  shape: ResponseShape;
  base: ResponseBase;
  disconnect: DisconnectWatch;
  reply: FastifyReply;
  /**
   * The response's own headers: the request id it echoes (the client's X-Request-Id, else the gateway's) and the
   * tenant's `x-ratelimit-*` when it has a budget (rate-limits.ts).
   */
  headers: Record<string, string>;
}

/**
 * Run `choices` and resolve with the response body (the reply itself when the client left).
 * @throws ApiError for a generation that failed (counted with its status), or 500 when a choice ended without an
 *   outcome; a 502 when a logprob candidate the tokenizer refuses came from the engine.
 */
export async function respondBuffered(a: RespondParts): Promise<unknown> {
  const { outputs, record, disconnect, reply } = a;
  const run = new GenerationRun(a.choices, (index, ev) => {
    if (
      ev.type !== 'delta' ||
      ev.logprobs.length > 0 ||
      ev.tokenIds !== undefined ||
      !outputs.outputs[index]!.appendContent(ev.text)
    )
      outputs.take(index, ev);
  });
  // One listener per request: a disconnect ends the run (every unfinished sub-request is aborted).
  const onDisconnect = () => run.fail(new ClientDisconnectedError());
  disconnect.signal.addEventListener('abort', onDisconnect, { once: true });
  try {
    run.start();
    await run.done;
  } catch (err) {
    if (err instanceof ClientDisconnectedError || disconnect.signal.aborted) return endDisconnected(record, reply);
    const apiErr = toApiError(err);
    record.countFailure(apiErr.statusCode, apiErr);
    throw apiErr;
  } finally {
    disconnect.signal.removeEventListener('abort', onDisconnect);
  }
  if (!outputs.complete()) throw new ApiError(500, 'generation ended without an outcome', { code: 'internal_error' });
  // Rendered before counting: a logprob candidate the tokenizer refuses makes it a 502 (`ChoiceOutputs.render`).
  const results = outputs.results();
  const body = a.shape.body(a.base, results, outputs.usage(), (i) => outputs.render(i, results[i]!.logprobs));
  if (a.shape.settled !== undefined) await a.shape.settled(); // Responses only: no extra turn elsewhere
  record.count(200, outputs.outcome());
  reply.headers(a.headers);
  return body;
}
