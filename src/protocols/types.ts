/**
 * Engine-neutral types at the seam between the engine protocols (TokenSpeed, vLLM), the transport and
 * the engine client. See `../shared/spec/architecture.md` ("The seams") and `../shared/spec/dp-routing.md`.
 *
 * Nothing here knows msgpack or sockets: protocols turn these into wire bytes and back.
 */

/**
 * The engine-neutral load signal of one DP rank (dp-routing.md section 11).
 * - `numRunning`: requests the rank reports as running (TokenSpeed: registered and not finish-committed,
 *   which *includes* the waiting ones; engine-wire.md section 4.9).
 * - `numWaiting`: the rank's scheduler waiting-queue length.
 * - `kvCacheUsage`: KV cache usage as a ratio 0..1 (TokenSpeed: kv_active_pages / kv_total_pages).
 */
export interface EngineLoad {
  numRunning: number;
  numWaiting: number;
  kvCacheUsage: number;
}

/**
 * Why a request ended, as the engine reports it (engine-wire.md sections 4.8 and 5.11).
 * `error` means the engine failed the request; the HTTP layer turns it into an error, not a finish.
 */
export type FinishReason = 'stop' | 'length' | 'abort' | 'error';

/** One per-request result inside a batch (one row of `BatchTokenIDOutSlim`, or one vLLM `EngineCoreOutput`). */
export interface EngineOutput {
  /** The engine request id (`rid` / `request_id`). */
  requestId: string;
  /** New token ids since this request's previous output (not cumulative). */
  newTokenIds: number[];
  /** Null while the request is still running; the output is terminal iff this is non-null. */
  finishReason: FinishReason | null;
  /** Prompt length in tokens (0 when the engine did not say). */
  promptTokens: number;
  /** Cumulative generated tokens so far. */
  completionTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
  /** Log-probability (natural log) of each token in `newTokenIds`; empty when not requested. May hold -Infinity/NaN. */
  logprobs: number[];
}

/**
 * One decoded output message from an engine rank (architecture.md "EngineBatch").
 * - `engineIndex`: the producing rank, as named inside the payload (engine-wire.md 4.8 `engine_index`).
 * - `finishedRequestIds`: every id the engine considers finished in this batch (TokenSpeed: the rids of the
 *   terminal rows; vLLM: `finished_requests` plus terminal outputs).
 * - `load`: present only when the batch carries a real snapshot (TokenSpeed: kv_total_pages > 0).
 */
export interface EngineBatch {
  engineIndex: number;
  outputs: EngineOutput[];
  finishedRequestIds: string[];
  load?: EngineLoad;
}

/**
 * Engine-neutral sampling options, already validated and defaulted by the HTTP layer (gateway.md section 8).
 * A protocol maps them onto its wire struct and applies its own normalization (TokenSpeed: engine-wire.md 4.5).
 * Units: token counts in tokens; probabilities as ratios.
 */
export interface SamplingOptions {
  /** Maximum new tokens; null lets the engine clamp to the remaining context. */
  maxNewTokens: number | null;
  minNewTokens: number;
  temperature: number;
  topP: number;
  /** -1 = disabled. */
  topK: number;
  minP: number;
  frequencyPenalty: number;
  presencePenalty: number;
  repetitionPenalty: number;
  /** Token ids that end generation (the matching token is included in the output). */
  stopTokenIds: number[];
  ignoreEos: boolean;
  skipSpecialTokens: boolean;
  spacesBetweenSpecialTokens: boolean;
  /** Null lets the engine derive one (TokenSpeed: CRC-32 of the rid). */
  seed: number | null;
  /** Token id (decimal) to additive bias; null when unset. */
  logitBias: Record<string, number> | null;
}

/** The defaults a request without sampling parameters gets (gateway.md section 8, "TokenSpeed defaults"). */
export const DEFAULT_SAMPLING: Readonly<SamplingOptions> = Object.freeze({
  maxNewTokens: null,
  minNewTokens: 0,
  temperature: 1.0,
  topP: 1.0,
  topK: -1,
  minP: 0.0,
  frequencyPenalty: 0.0,
  presencePenalty: 0.0,
  repetitionPenalty: 1.0,
  stopTokenIds: [],
  ignoreEos: false,
  skipSpecialTokens: true,
  spacesBetweenSpecialTokens: true,
  seed: null,
  logitBias: null,
});

/** One engine request (n = 1; fan-out happens above the engine client). */
export interface GenerateRequest {
  /** Engine request id minted by the gateway (never a client-supplied id; dp-routing.md section 7). */
  requestId: string;
  /** Tokenized prompt. */
  promptTokenIds: number[];
  sampling: SamplingOptions;
  /** Streaming cadence (TokenSpeed `stream`: a row every token instead of every 50). */
  stream: boolean;
  /** Ask for the sampled token's logprob. */
  returnLogprob: boolean;
}

/** The single raw type byte that precedes every request payload (engine-wire.md section 1.6). */
export const RequestType = Object.freeze({
  ADD: 0x00,
  ABORT: 0x01,
  START_DP_WAVE: 0x02,
  UTILITY: 0x03,
} as const);
export type RequestTypeByte = (typeof RequestType)[keyof typeof RequestType];

/**
 * One engine family's message shapes (architecture.md "EngineProtocol"). Transport and engine client are
 * generic over it. Encoders and decoders are pure and synchronous.
 */
export interface EngineProtocol {
  readonly name: 'tokenspeed' | 'vllm';
  /**
   * Tokens of `max_model_len` the engine keeps out of reach of prompt + completion (tokens, ≥ 0). The engine client
   * subtracts it from the handshake's `max_model_len` to get the usable context the gateway admits against
   * (gateway.md 9). TokenSpeed: 2, because it clamps every `max_new_tokens` (nil or explicit) to
   * `(context_len − 1) − prompt_len − 1` (engine-wire.md 4.4, last paragraph), so prompt + completion never exceeds
   * `max_model_len − 2` and a prompt of `max_model_len − 2` tokens or more gets no completion at all. vLLM: 0 (its
   * EngineCore serves `prompt_len + max_tokens ≤ max_model_len`).
   */
  readonly reservedContextTokens: number;
  /** The ADD payload (one msgpack frame). Throws `WireEncodeError` on a value the wire cannot carry. */
  encodeAdd(request: GenerateRequest): Uint8Array;
  /** The ABORT payload: a msgpack `list[str]` (engine-wire.md 4.7). */
  encodeAbort(requestIds: readonly string[]): Uint8Array;
  /**
   * Decode one output message (frame 0 = payload, later frames = aux). The caller has already checked for
   * `ENGINE_CORE_DEAD`. Throws `WireDecodeError` (naming the field) on anything malformed.
   */
  decodeOutput(frames: readonly Uint8Array[]): EngineBatch;
}

/**
 * The engine's registration frame (`EngineCoreReadyResponse`, engine-wire.md section 2.5), as the gateway uses it.
 * Units: `maxModelLen` in tokens; `prefixGranularity` in tokens per KV page.
 */
export interface ReadyResponse {
  maxModelLen: number;
  numGpuBlocks: number;
  /** TokenSpeed `prefix_granularity` / vLLM `block_size`. */
  prefixGranularity: number;
  dtype: 'float16' | 'bfloat16' | 'float32';
  vllmVersion: string;
  worldSize: number;
  /** > 1 on any rank means a lockstep (MoE) group (engine-wire.md 5.12). */
  dataParallelSize: number;
  tensorParallelSize: number;
  pipelineParallelSize: number;
  decodeContextParallelSize: number;
  /** Informational only: routing uses the identity (engine-wire.md 1.5). */
  dataParallelRank: number;
  maxNumSeqs: number;
  /** Signed: a sender may pass -1. */
  maxNumBatchedTokens: number;
  instanceId: string;
  kvCacheSizeTokens: number | null;
  kvCacheMaxConcurrency: number | null;
}
