/**
 * Engine-neutral types at the seam between the engine protocols (TokenSpeed, vLLM), the transport and
 * the engine client. See docs/reference/architecture.md ("The seams") and docs/reference/dp-routing.md.
 *
 * Nothing here knows msgpack or sockets: protocols turn these into wire bytes and back.
 */

/**
 * The engine-neutral load signal of one DP rank (dp-routing.md section 11), as the engine reported it.
 * - `numRunning`: requests the rank reports as running (TokenSpeed: registered and not finish-committed,
 *   which *includes* the waiting ones; engine-wire.md section 4.9).
 * - `numWaiting`: the rank's scheduler waiting-queue length.
 * - `kvCacheUsage`: KV cache usage as a ratio 0..1 (TokenSpeed: kv_active_pages / kv_total_pages).
 * - `runningIncludesWaiting`: true when `numRunning` already counts the `numWaiting` requests (TokenSpeed,
 *   engine-wire.md 4.9: the two overlap), absent or false when they are disjoint (vLLM `num_running_reqs` /
 *   `num_waiting_reqs`, 5.10). Scoring reads it so a queued TokenSpeed request is not counted twice (dp-routing.md
 *   14.2; `queuedRequests` in src/engine-client/policy.ts).
 */
export interface EngineLoad {
  numRunning: number;
  numWaiting: number;
  kvCacheUsage: number;
  runningIncludesWaiting?: boolean;
}

/**
 * Why a request ended, as the engine reports it (engine-wire.md sections 4.8 and 5.11).
 * `error` means the engine failed the request; the HTTP layer turns it into an error, not a finish.
 */
export type FinishReason = 'stop' | 'length' | 'abort' | 'error';

/**
 * The per-request fields every output has, however far it has travelled (engine-wire.md 4.8, 5.9).
 * - `requestId`: the engine request id (`rid` / `request_id`).
 * - `newTokenIds`: new token ids since this request's previous output (not cumulative).
 * - `finishReason`: null while the request is still running; the output is terminal iff this is non-null.
 * - `logprobs`: log-probability (natural log) of each token in `newTokenIds`; empty when not requested. May hold
 *   -Infinity/NaN.
 * - `stopReason`: what ended a `stop` finish, when the engine says (vLLM `stop_reason`, engine-wire.md 5.9: the
 *   matched stop token id as a number, the matched stop string as a string, null for EOS/none); absent for engines
 *   that do not report it (TokenSpeed).
 */
export interface EngineOutputBase {
  requestId: string;
  newTokenIds: number[];
  finishReason: FinishReason | null;
  logprobs: number[];
  stopReason?: number | string | null;
  /**
   * The ranked candidates of each token in `newTokenIds` (best first), when the request asked for top logprobs and
   * the engine returns them (vLLM: columns 1..K of `new_logprobs`, engine-wire.md 5.6; TokenSpeed never does).
   * Absent otherwise. Parallel to `newTokenIds`.
   */
  topLogprobs?: TokenCandidate[][];
  /**
   * The pooled vector of a pooling request (an embedding; float32 values), on its terminal output only (vLLM
   * `pooling_output`, docs/wire/vllm-pooling.md). Absent for generation.
   */
  pooled?: Float32Array;
}

/** One ranked candidate token at a position: its id and natural-log probability (may be −∞ or NaN). */
export interface TokenCandidate {
  id: number;
  logprob: number;
}

/**
 * One per-request result **as a protocol decodes it** (one row of `BatchTokenIDOutSlim`, or one vLLM
 * `EngineCoreOutput`), inside an `EngineBatch`. Token counts (tokens) are null when the engine did not report them
 * in this output, and protocols hold no per-request state to fill them (engine-wire.md 5.9: vLLM sends no
 * cumulative completion count, and prompt/cached counts only in `prefill_stats`). The engine client's per-request
 * stream fills them (see `EngineOutput`).
 * - `promptTokens`: prompt length; TokenSpeed: every row (4.8); vLLM: `prefill_stats.num_prompt_tokens` or null.
 * - `completionTokens`: cumulative generated tokens so far; TokenSpeed: every row; vLLM: always null.
 * - `cachedTokens`: prompt tokens served from the prefix cache; TokenSpeed: every row; vLLM: from `prefill_stats`.
 */
export interface EngineOutputRow extends EngineOutputBase {
  promptTokens: number | null;
  completionTokens: number | null;
  cachedTokens: number | null;
}

/**
 * One per-request result **as the request's stream yields it** (dp-routing.md section 4): the decoded row with
 * every token count filled in by the engine client, so consumers (the HTTP layer, usage reporting) always see
 * numbers (tokens):
 * - `promptTokens`: the last value the engine reported for this request, else the prompt length the gateway sent;
 * - `completionTokens`: the engine's cumulative count when reported, else the running total of `newTokenIds` over
 *   the request's outputs (continuing from the last reported count);
 * - `cachedTokens`: the last value the engine reported for this request, else 0.
 */
export interface EngineOutput extends EngineOutputBase {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}

/**
 * How a copy of an output row treats a field (`OUTPUT_ROW_FIELDS`):
 * - `id`: the engine request id (the channel's OUT record does not carry it: the record's handle names the request);
 * - `row`: carried as the engine gave it, by reference;
 * - `count`: a token count: null in an `EngineOutputRow` when the engine did not report it, a number in an
 *   `EngineOutput` (the request stream fills it);
 * - `optional`: absent unless the engine reported it, and kept absent (not `undefined`) by every copy.
 */
export type OutputFieldKind = 'id' | 'row' | 'count' | 'optional';

/** The kind each field of `EngineOutputRow` must have in `OUTPUT_ROW_FIELDS`, read off the two interfaces. */
type KindOfOutputField<F extends keyof EngineOutputRow> = F extends 'requestId'
  ? 'id'
  : object extends Pick<EngineOutputRow, F>
    ? 'optional'
    : EngineOutputRow[F] extends EngineOutput[F]
      ? 'row'
      : 'count';

/**
 * Every field of an output row, declared once with its kind (`OutputFieldKind`), for the copies of a row that cross
 * a seam by hand because they are on the per-token path: the request stream's copy into an `EngineOutput`
 * (engine-client/request-stream.ts `deliver`) and the channel's OUT record between the router and a front
 * (fronts/channel/records.ts `OUT_ELEMENT`, which messages.ts writes and decode.ts reads). The `satisfies` holds the
 * table to exactly the fields of `EngineOutputRow`, each with the kind the interfaces give it, so a field added to
 * the interfaces does not compile until it is here; `OUT_ELEMENT` is a `Record` over these names, so it does not
 * compile until the field has a place in the OUT record; the literals of the decoders (TokenSpeed, vLLM, the
 * channel) and of the stream's copy do not compile without every required field. test/fronts/output-row-fields.test.ts
 * sends a row with every field of this table set (and one with every optional field absent) through the request
 * stream and both of the channel's readers, so a copy that drops a field fails it.
 */
export const OUTPUT_ROW_FIELDS = {
  requestId: 'id',
  newTokenIds: 'row',
  finishReason: 'row',
  logprobs: 'row',
  promptTokens: 'count',
  completionTokens: 'count',
  cachedTokens: 'count',
  stopReason: 'optional',
  topLogprobs: 'optional',
  pooled: 'optional',
} as const satisfies { [F in keyof EngineOutputRow]-?: KindOfOutputField<F> };

/** The name of a field of an output row (`OUTPUT_ROW_FIELDS`). */
export type OutputRowField = keyof typeof OUTPUT_ROW_FIELDS;

/**
 * A wave notification carried by an output message (engine-wire.md 5.8, 5.12; dp-routing.md 13.3): `complete` = the
 * lockstep group drained wave `wave` and parked (`wave_complete`); `start` = a rank received a request for an
 * already-drained wave and asks the group to start wave `wave` (`start_wave`). `wave` is a wave number ≥ 0.
 */
export interface WaveEvent {
  kind: 'complete' | 'start';
  wave: number;
}

/**
 * One decoded output message from an engine rank (architecture.md "EngineBatch").
 * - `engineIndex`: the producing rank, as named inside the payload (engine-wire.md 4.8 `engine_index`).
 * - `outputs`: the per-request rows, token counts as reported (see `EngineOutputRow`).
 * - `finishedRequestIds`: every id the engine considers finished in this batch (TokenSpeed: the rids of the
 *   terminal rows; vLLM: `finished_requests` plus terminal outputs).
 * - `load`: present only when the batch carries a real snapshot (TokenSpeed: kv_total_pages > 0).
 * - `wave`: present only on a wave notification (vLLM; engine-wire.md 5.8 "Wave complete" / "Start wave" shapes,
 *   whose batch is otherwise empty). The engine client applies it in dispatcher step 3 (dp-routing.md 8, 13.3).
 */
export interface EngineBatch {
  engineIndex: number;
  outputs: EngineOutputRow[];
  finishedRequestIds: string[];
  load?: EngineLoad;
  wave?: WaveEvent;
  /** The answer to a utility call (vLLM `utility_output`, docs/wire/vllm-utility.md); such a batch has no outputs. */
  utility?: UtilityReply;
  /**
   * The LoRA adapters the rank's scheduler holds requests for, by name (vLLM `SchedulerStats.running_lora_adapters` /
   * `waiting_lora_adapters`: adapter name → requests); absent when the report has none.
   */
  loraAdapters?: LoraAdapterCounts;
}

/** A utility call's answer: its call id, the engine's failure message (null on success) and the returned value. */
export interface UtilityReply {
  callId: number;
  failure: string | null;
  result: unknown;
}

/** Requests per LoRA adapter name on one rank, running and waiting (vLLM scheduler stats). */
export interface LoraAdapterCounts {
  running: Record<string, number>;
  waiting: Record<string, number>;
}

/**
 * A LoRA adapter a request runs with (vLLM `LoRARequest`, engine-wire.md 5.2 index 6): its served name, the integer
 * id the engines know it by (unique per gateway, ≥ 1), the path the engine loads it from, the base model's name.
 */
export interface LoraTarget {
  name: string;
  id: number;
  path: string;
  baseModelName: string | null;
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
  /** A structured-output constraint (grammar-guided decoding), or null/absent for free text. */
  structuredOutput?: StructuredOutput | null;
  /** Only these token ids may be sampled (vLLM `allowed_token_ids`; not on TokenSpeed's wire); null/absent: any. */
  allowedTokenIds?: number[] | null;
  /**
   * Token sequences the engine must not complete (vLLM `_bad_words_token_ids`, made from the request's `bad_words` as
   * vLLM's frontend makes it; not on TokenSpeed's wire); null/absent: none.
   */
  badWordsTokenIds?: number[][] | null;
  /**
   * Most tokens the model may think before it must answer (vLLM `thinking_token_budget`, TokenSpeed
   * `thinking_budget`; the engine needs its reasoning configuration to apply it); null/absent: no budget.
   */
  thinkingTokenBudget?: number | null;
}

/**
 * One structured-output constraint, engine-neutral (gateway.md 8 "response_format / structured output"; vLLM
 * `StructuredOutputsParams`, engine-wire.md 5.3; TokenSpeed `json_schema` / `regex` / `ebnf` / `structural_tag`, 4.4):
 * - `json`: a JSON schema, parsed (an object) or as the raw string when it did not parse;
 * - `json_object`: any JSON object;
 * - `regex`: a regular expression the whole output must match;
 * - `choice`: the output is exactly one of the strings;
 * - `grammar`: an EBNF / Lark grammar, passed through as text;
 * - `structural_tag`: a structural-tag specification (JSON text).
 */
export type StructuredConstraint =
  | { kind: 'json'; schema: unknown }
  | { kind: 'json_object' }
  | { kind: 'regex'; pattern: string }
  | { kind: 'choice'; choices: string[] }
  | { kind: 'grammar'; grammar: string }
  | { kind: 'structural_tag'; tag: string };

/** A constraint plus vLLM's structured-output options (engine-wire.md 5.3; each false/null = not set). */
export interface StructuredOutput {
  constraint: StructuredConstraint;
  disableAnyWhitespace: boolean;
  disableAdditionalProperties: boolean;
  whitespacePattern: string | null;
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
  /**
   * With `returnLogprob`: how many ranked candidates per position to return besides the sampled token (0 = the
   * sampled token only; vLLM `logprobs` = k, engine-wire.md 5.3 / 5.6). Absent = 0. TokenSpeed can only return 0.
   */
  topLogprobs?: number;
  /**
   * vLLM's request `priority` (an integer; lower is served first by an engine started with `--scheduling-policy
   * priority`, engine-wire.md 5.2 element 13). Absent = 0. TokenSpeed's wire has no such field.
   */
  priority?: number;
  /**
   * Present: a pooling request (an embedding) instead of a generation; `sampling` is then not sent (vLLM: nil
   * `sampling_params`, docs/wire/vllm-pooling.md). Only vLLM's wire carries it; TokenSpeed's encoder refuses it.
   */
  pooling?: PoolingOptions;
  /** The LoRA adapter to run with (vLLM's wire only; TokenSpeed's encoder refuses it). Absent: the base model. */
  lora?: LoraTarget;
  /**
   * The W3C trace-context headers of the gateway's span for the request (src/tracing.ts `TraceCarrier`): vLLM gets
   * them as `trace_headers` (engine-wire.md 5.2 element 14), so its spans join the trace; the engine client's queue
   * and route spans are its children. TokenSpeed's wire has no such field. Absent: the request is not traced.
   */
  trace?: Readonly<Record<string, string>>;
}

/**
 * What a pooling request asks for (vLLM `PoolingParams`, docs/wire/vllm-pooling.md): the task (`embed`: one vector
 * per input), the Matryoshka `dimensions` (elements; null = the model's size) and whether the engine L2-normalizes
 * the vector (`use_activation`).
 */
export interface PoolingOptions {
  task: 'embed';
  dimensions: number | null;
  normalize: boolean;
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
 * generic over it. Encoders and decoders are synchronous, and pure except for the per-rank wire facts a protocol may
 * remember (vLLM: each rank's output layout).
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
  /**
   * The ADD payload (one msgpack frame) for `request` sent to the rank `target` names. `target.dpRank` is the DP rank
   * the request is **pinned** to (dp-routing.md 9.1; gateway.md 14 `X-data-parallel-rank`), or null when the client
   * chose the rank itself; absent `target` means unpinned. vLLM sends it as `data_parallel_rank` (engine-wire.md 5.2
   * element 8); TokenSpeed ignores it (gateway.md 14: routing is by identity, SMG never sends TokenSpeed's trailing
   * field). Pure: the same arguments give the same bytes (vLLM: up to its `arrival_time` clock). Throws
   * `WireEncodeError` on a value the wire cannot carry.
   */
  encodeAdd(request: GenerateRequest, target?: AddTarget): Uint8Array;
  /** The ABORT payload: a msgpack `list[str]` (engine-wire.md 4.7). */
  encodeAbort(requestIds: readonly string[]): Uint8Array;
  /**
   * The START_DP_WAVE payload `[wave, nil]` (request type `02`; engine-wire.md 5.7) that wakes a lockstep group
   * (dp-routing.md 13.2). `wave` is the client's wave clock, an integer ≥ 0. Absent = the wire has no wave message
   * (TokenSpeed): a lockstep group's clock then ticks but nothing is sent (dp-routing.md 13.2, inferred). Throws
   * `WireEncodeError` for a wave that is not an integer ≥ 0.
   */
  encodeStartWave?(wave: number): Uint8Array;
  /**
   * The UTILITY payload (request type `03`, docs/wire/vllm-utility.md) calling EngineCore method `method` with
   * `args` under `callId` (an integer ≥ 0 the reply names). Absent: the wire has no utility calls (TokenSpeed).
   * Throws `WireEncodeError` for an argument the wire cannot carry.
   */
  encodeUtility?(callId: number, method: string, args: readonly unknown[]): Uint8Array;
  /**
   * Decode one output message (frame 0 = payload, later frames = aux). The caller has already checked for
   * `ENGINE_CORE_DEAD`. No per-request state: token counts the engine did not report in this message are null (see
   * `EngineOutputRow`); a protocol may remember per-rank wire facts (vLLM: each rank's output layout). Throws
   * `WireDecodeError` (naming the field) on anything malformed.
   */
  decodeOutput(frames: readonly Uint8Array[]): EngineBatch;
  /**
   * Rank `engineIndex` completed its handshake with `ready` (a fresh engine process; the engine client calls this
   * before the rank takes requests). Optional: a protocol that keeps per-rank wire facts forgets the previous
   * process's and reads what the ready response says (vLLM: the `EngineCoreOutput` layout from `vllm_version`,
   * docs/wire/vllm-output.md). Never throws.
   */
  noteRankJoined?(engineIndex: number, ready: ReadyResponse): void;
}

/**
 * Where an ADD goes, as far as the payload cares (the identity frame carries the actual routing, engine-wire.md 1.5).
 * `dpRank`: the pinned DP rank (an engine index ≥ 0), or null for an unpinned request.
 */
export interface AddTarget {
  dpRank: number | null;
}

/**
 * Which shape of `EngineCoreReadyResponse` a rank sent (engine-wire.md 2.5; issue #14):
 * - `long`: every key SMG's decoder requires (`prefix_granularity`/`block_size`, `dtype`, `vllm_version`,
 *   `world_size`, `data_parallel_size`) is present: TokenSpeed's 19 keys, vLLM after upstream commit 9aaf83ef;
 * - `short`: none of the keys the long form added: vLLM releases up to at least 9aaf83ef (2026-05-19) send
 *   `max_model_len`, `num_gpu_blocks`, `dp_stats_address` only;
 * - `partial`: some but not all of them (vLLM releases in between sent e.g. `dtype` and `vllm_version` only).
 */
export type ReadyResponseForm = 'short' | 'partial' | 'long';

/**
 * The engine's registration frame (`EngineCoreReadyResponse`, engine-wire.md section 2.5), as the gateway uses it.
 * Units: `maxModelLen` in tokens; `numGpuBlocks` in KV pages; `prefixGranularity` in tokens per KV page.
 *
 * Only `maxModelLen` is needed to serve (admission and the default completion limit, gateway.md 9). Everything else
 * informs: `null` means the rank did not report it (the short form lacks it) or reported it with the wrong type
 * (`decodeReadyResponse` then notes it). The optional keys of the long form keep SMG's decoder defaults when absent
 * (0 for the parallel sizes, the rank, the limits; `''` for `instanceId`; null for the KV-cache facts).
 */
export interface ReadyResponse {
  /**
   * The form the rank sent (set by `decodeReadyResponse`; absent on a response built locally, e.g. by a simulated
   * rank before it encodes it).
   */
  form?: ReadyResponseForm;
  maxModelLen: number;
  /** Device KV pages; null = not reported. */
  numGpuBlocks: number | null;
  /** TokenSpeed `prefix_granularity` / vLLM `block_size`; null = not reported (short form). */
  prefixGranularity: number | null;
  /**
   * Model dtype exactly as reported (vLLM writes `str(torch dtype)` without `torch.`); not limited to the three SMG
   * knows (`KNOWN_DTYPES`, handshake.ts). Null = not reported (short form).
   */
  dtype: string | null;
  /** Null = not reported (short form). Logged only. */
  vllmVersion: string | null;
  /** TP × PP; null = not reported (short form). */
  worldSize: number | null;
  /**
   * > 1 on any rank means a lockstep (MoE) group (engine-wire.md 5.12). Null = not reported (short form): the group
   * kind is then unknown until a rank sends a wave notification (src/engine-client/waves.ts).
   */
  dataParallelSize: number | null;
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
  /**
   * The rank's `--kv-events-config` as it reports it (newer vLLM; TokenSpeed's field is always nil, docs/reference/
   * kv-events.md 1), or absent/null. Set by `decodeReadyResponse` only when the engine filled it.
   */
  kvEventsConfig?: Record<string, unknown> | null;
  /**
   * Informational keys that had the wrong type and were treated as not reported, one line each (`"world_size:
   * expected uint, got str"`). Set by `decodeReadyResponse` only when there are some; the gateway logs them.
   */
  notes?: string[];
}
