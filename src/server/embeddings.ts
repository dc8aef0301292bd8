/**
 * The embeddings request and response (OpenAI's `POST /v1/embeddings`, vLLM's `EmbeddingCompletionRequest`): the
 * inputs as token-id lists, the pooling options the engine gets, and the response body. Pure, except that a large
 * text input is tokenized on the off-loop tokenizer (prompt.ts).
 *
 * - `input`: a string, a list of strings, a list of token ids (one input) or a list of token-id lists; every input
 *   must be non-empty after tokenizing and at most the group's `max_model_len` tokens (vLLM: a pooling prompt may
 *   fill the whole context, no completion follows), unless `truncate_prompt_tokens` keeps only its last k tokens
 *   (-1: the last `max_model_len`).
 * - `dimensions`: Matryoshka truncation, 1..the model's size (the engine refuses a size its model cannot give).
 * - `encoding_format`: `float` (lists of numbers) or `base64` (the float32 little-endian bytes, as OpenAI sends them).
 * - `add_special_tokens`: default true for embeddings (vLLM's default).
 */
import type { PoolingOptions } from '../protocols/types.js';
import type { OffLoopSignal } from '../tokenizer/off-loop.js';
import { float32LeBytes } from '../wire/float32.js';
import { badRequest } from './errors.js';
import type { PromptTokenizer } from './prompt.js';
import type { EmbeddingBodyT } from './schemas.js';

/** What one embeddings request asks of the engines, after validation. */
export interface EmbeddingOptions {
  pooling: PoolingOptions;
  encoding: 'float' | 'base64';
  /** Keep only the last k tokens of each input (tokens), or null; -1 resolves to the context. */
  truncate: number | null;
  addSpecialTokens: boolean;
}

/**
 * The validated options of `body`. Throws `ApiError` 400 naming the parameter: `dimensions` below 1,
 * `truncate_prompt_tokens` below -1 or 0, `priority` other than 0 (the band header sets it).
 */
export function embeddingOptions(body: EmbeddingBodyT): EmbeddingOptions {
  const d = body.dimensions ?? null;
  if (d !== null && d < 1) throw badRequest(`'dimensions' must be at least 1; got ${d}`, 'dimensions');
  const t = body.truncate_prompt_tokens ?? null;
  if (t !== null && (t < -1 || t === 0))
    throw badRequest(
      `'truncate_prompt_tokens' must be -1 (the context) or at least 1; got ${t}`,
      'truncate_prompt_tokens',
    );
  if ((body.priority ?? 0) !== 0)
    throw badRequest(
      `parameter 'priority' is not served in the request body: name a priority band with the x-gateway-inference-objective header`,
      'priority',
      'unsupported_parameter',
    );
  return {
    pooling: { task: 'embed', dimensions: d, normalize: true },
    encoding: body.encoding_format ?? 'float',
    truncate: t,
    addSpecialTokens: body.add_special_tokens ?? true,
  };
}

/** The inputs of `input` in order: each a string to tokenize or token ids to check. */
function inputList(input: EmbeddingBodyT['input']): (string | number[])[] {
  if (typeof input === 'string') return [input];
  if (input.length === 0) throw badRequest(`'input' must not be empty`, 'input');
  const first = input[0];
  if (typeof first === 'number') return [input as number[]];
  return input as (string | number[])[];
}

/**
 * The token ids of every input (see the module comment), each checked against `maxModelLen` (tokens) after
 * truncation. Throws (or rejects with) `ApiError` 400 naming `input` (an empty input, a token id outside the
 * vocabulary, an input beyond the context: code `context_length_exceeded`) or the off-loop tokenizer's error.
 */
export async function embeddingInputs(
  tokenizer: PromptTokenizer,
  input: EmbeddingBodyT['input'],
  opts: EmbeddingOptions,
  maxModelLen: number,
  signal?: OffLoopSignal,
): Promise<number[][]> {
  if (opts.truncate !== null && opts.truncate > maxModelLen)
    throw badRequest(
      `'truncate_prompt_tokens' (${opts.truncate}) must be at most the model's context, ${maxModelLen} tokens`,
      'truncate_prompt_tokens',
    );
  const keep = opts.truncate === null ? null : opts.truncate === -1 ? maxModelLen : opts.truncate;
  // Without truncation a text that cannot fit is refused before it is tokenized (its lower-bound count).
  const maxTokens = keep === null ? maxModelLen + 1 : Number.MAX_SAFE_INTEGER;
  const vocab = tokenizer.tokenizer.vocabSize;
  const lists = inputList(input);
  const out: number[][] = [];
  let sinceYield = 0;
  for (let i = 0; i < lists.length; i++) {
    const item = lists[i]!;
    // Short texts are tokenized on this thread: hand the loop back now and then, so other requests' streams go on.
    if (typeof item === 'string' && (sinceYield += item.length) > YIELD_AFTER_CHARS) {
      sinceYield = 0;
      await new Promise((resolve) => setImmediate(resolve));
      if (signal?.aborted === true) throw new Error('the client left while its inputs were tokenized');
    }
    const where = lists.length === 1 && typeof input === 'string' ? 'input' : `input[${i}]`;
    let ids: number[];
    if (typeof item === 'string') {
      const r = await tokenizer.encodePrompt(item, {
        addSpecialTokens: opts.addSpecialTokens,
        maxTokens,
        ...(signal === undefined ? {} : { signal }),
      });
      if (!Array.isArray(r)) throw tooLong(where, `at least ${r.tokens}`, maxModelLen);
      ids = r;
    } else {
      ids = item;
      const bad = ids.findIndex((id) => !Number.isSafeInteger(id) || id < 0 || id >= vocab);
      if (bad >= 0) throw badRequest(`'${where}' token ids must be in [0, ${vocab}); got ${ids[bad]}`, 'input');
    }
    if (keep !== null && ids.length > keep) ids = ids.slice(ids.length - keep);
    if (ids.length === 0) throw badRequest(`'${where}' is empty: there is nothing to embed`, 'input');
    if (ids.length > maxModelLen) throw tooLong(where, String(ids.length), maxModelLen);
    out.push(ids);
  }
  return out;
}

function tooLong(where: string, count: string, maxModelLen: number) {
  return badRequest(
    `This model's maximum context length is ${maxModelLen} tokens. However, '${where}' resulted in ${count} tokens. ` +
      `Please reduce its length, or set 'truncate_prompt_tokens'.`,
    'input',
    'context_length_exceeded',
  );
}

/** Characters of input text tokenized on the event loop between two yields (about 10 ms of work). */
const YIELD_AFTER_CHARS = 32_768;

/** One vector as the response carries it: numbers, or base64 of its float32 little-endian bytes. */
export function encodeEmbedding(v: Float32Array, encoding: 'float' | 'base64'): number[] | string {
  if (encoding === 'base64') return Buffer.from(float32LeBytes(v)).toString('base64');
  return Array.from(v);
}

/** The response body (OpenAI's `CreateEmbeddingResponse`, with vLLM's `id` and `created`). Tokens in `usage`. */
export function embeddingResponse(
  base: { id: string; created: number; model: string },
  vectors: readonly Float32Array[],
  encoding: 'float' | 'base64',
  promptTokens: number,
): Record<string, unknown> {
  return {
    id: base.id,
    object: 'list',
    created: base.created,
    model: base.model,
    data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: encodeEmbedding(v, encoding) })),
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
}
