/**
 * The accumulator of one request's choices (issue 28 part 3): every choice's `ChoiceOutput` (its parsers and result),
 * the folding of a generation event into it (a finish also counts the choice in the request's record), the rendering
 * of its logprobs in the endpoint's shape, and the request-wide results, usage and outcome. The buffered and the
 * streamed response (respond-buffered.ts, respond-streamed.ts) both answer from it.
 */
import type { BackendStream } from './backend.js';
import { ChoiceOutput, type ChoiceDelta, type ChoiceOutputOptions, type ChoiceResult } from './choice-output.js';
import { blameEngineForTokenId } from './errors.js';
import { makeUsage, type GenerationEvent, type TokenLogprob, type Usage } from './generation.js';
import type { TokenText } from './logprobs.js';
import type { RequestOutcome } from './metrics.js';
import type { RequestRecord } from './request-record.js';
import { perChoice, type ResponseShape } from './response-shape.js';

/** One request's choices (see the module comment). */
export class ChoiceOutputs {
  /** Per choice, in index order. */
  readonly outputs: ChoiceOutput[];
  /** Per choice: the running text offset of its logprobs (completions). */
  private readonly offsets: Array<{ value: number }>;

  /**
   * @param streams the choices' engine streams (index order), named when a logprob candidate is refused.
   * @param topLogprobs the requested top-logprob count, or null for none.
   * @param output the parsers of choice `index` (reasoning, tool calls); absent: plain content.
   * @param keepText keep the text in the result (a buffered response); a stream sends it as it comes.
   */
  constructor(
    private readonly shape: ResponseShape,
    private readonly record: RequestRecord,
    private readonly streams: readonly BackendStream[],
    private readonly tokenText: TokenText,
    readonly topLogprobs: number | null,
    private readonly promptTokens: number,
    output: ((index: number) => ChoiceOutputOptions) | undefined,
    keepText: boolean,
  ) {
    const n = streams.length;
    this.outputs = perChoice(
      n,
      (i) => new ChoiceOutput({ ...(output?.(i) ?? { reasoning: null, tools: null }), keepText }),
    );
    this.offsets = perChoice(n, () => ({ value: 0 }));
  }

  /** Fold one event into choice `index`; returns the choice's delta (a finish also counts the choice). */
  take(index: number, ev: GenerationEvent): ChoiceDelta {
    const out = this.outputs[index]!;
    const delta = out.push(ev);
    if (ev.type === 'finish')
      this.record.choiceFinished(
        index,
        ev.finishReason,
        out.result!.finishReason,
        ev.usage.completion_tokens,
        ev.cachedTokens,
      );
    return delta;
  }

  /**
   * Choice `index`'s logprob `entries` in the endpoint's shape, or null when none were requested.
   * @throws ApiError 502 naming the rank when a candidate id is one the tokenizer refuses (the engine sent it).
   */
  render(index: number, entries: readonly TokenLogprob[]): Record<string, unknown> | null {
    const k = this.topLogprobs;
    if (k === null) return null;
    try {
      return this.shape.renderLogprobs(entries, k, this.tokenText, this.offsets[index]!);
    } catch (err) {
      throw blameEngineForTokenId(err, this.streams[index]!.requestId, this.streams[index]!.engineIndex);
    }
  }

  /** Whether every choice has its result. */
  complete(): boolean {
    return this.outputs.every((o) => o.result !== null);
  }

  /** Every choice's result, index order (call once `complete()`). */
  results(): ChoiceResult[] {
    return this.outputs.map((o) => o.result!);
  }

  /** The usage: the prompt counted once over the choices, and so are its cached tokens (choice 0's: shared prompt). */
  usage(): Usage {
    return makeUsage(
      this.promptTokens,
      this.outputs.reduce((sum, o) => sum + (o.result?.completionTokens ?? 0), 0),
      this.outputs[0]?.result?.usage.prompt_tokens_details.cached_tokens ?? 0,
    );
  }

  /** The request's outcome: choice 0's finish reason. */
  outcome(): RequestOutcome {
    return this.outputs[0]!.result?.finishReason ?? 'stop';
  }
}
