/**
 * vLLM EngineCore's msgpack wire (engine-wire.md section 5): the `EngineProtocol` and the wire structs
 * (`EngineCoreRequest` with its sparse sampling map, START_DP_WAVE, `EngineCoreOutputs` / `EngineCoreOutput`,
 * `SchedulerStats`, logprob tensors). ABORT reuses TokenSpeed's `list[str]` payload (5.4).
 */
export { vllmProtocol, createVllmProtocol } from './protocol.js';
export type { VllmProtocol, VllmProtocolOptions } from './protocol.js';
export {
  encodeEngineCoreRequest,
  decodeEngineCoreRequest,
  toEngineCoreRequest,
  engineCoreRequestCodec,
  loraRequestCodec,
  ENGINE_CORE_REQUEST_LENGTH,
} from './request.js';
export type { EngineCoreRequest, EngineCoreRequestContext, LoraRequest, ReasoningParserKwargs } from './request.js';
export {
  vllmSamplingParamsCodec,
  defaultVllmSamplingParams,
  toVllmSamplingParams,
  structuredOutputsCodec,
  defaultStructuredOutputs,
  logitBiasCodec,
  repetitionDetectionCodec,
  STRUCTURED_OUTPUT_CONSTRAINTS,
} from './sampling.js';
export type {
  VllmSamplingParams,
  VllmSamplingContext,
  StructuredOutputsParams,
  RepetitionDetectionParams,
} from './sampling.js';
export { applyEosTokenIds, resolveEosConfig, NO_EOS } from './eos.js';
export type { VllmEosConfig, VllmEosFields, EosSources } from './eos.js';
export { encodeStartDpWave, decodeStartDpWave } from './wave.js';
export type { StartDpWave } from './wave.js';
export {
  decodeEngineCoreOutputs,
  encodeEngineCoreOutputs,
  encodeEngineCoreOutputsFrames,
  classifyEngineCoreOutputs,
  engineCoreOutputsToEngineBatch,
  engineCoreOutputCodecs,
  defaultEngineCoreOutput,
  defaultEngineCoreOutputs,
  toFinishReason,
  VllmFinishReason,
  prefillStatsCodec,
  prefillStats13Codec,
  prefillStatsCodecFor,
  stopReasonCodec,
  finishReasonCodec,
  detectOutputLayout,
  peekEngineIndex,
  ENGINE_CORE_OUTPUT_LAYOUTS,
} from './output.js';
export type {
  EngineCoreOutput,
  EngineCoreOutputs,
  EngineCoreOutputsKind,
  EngineCoreEvent,
  PrefillStats,
  StopReason,
  WaveEvent,
  EncodeOutputsOptions,
  EngineCoreOutputLayout,
  OutputLayoutEvidence,
} from './output.js';
export { OutputLayouts, outputLayoutOfVersion, KNOWN_VLLM_COMMIT_LAYOUTS } from './layout.js';
export type { OutputLayoutDecision, OutputLayoutSource } from './layout.js';
export {
  schedulerStatsCodec,
  schedulerStatsFor,
  loadFromSchedulerStats,
  prefixCacheStatsCodec,
  kvCacheEvictionEventCodec,
} from './stats.js';
export type { SchedulerStats, PrefixCacheStats, KvCacheEvictionEvent } from './stats.js';
export { logprobsCodec, ndArrayCodec, parseDtype, sampledLogprobs, EXT_RAW_VIEW, EXT_PICKLE_CODES } from './tensors.js';
export type { VllmLogprobs, WireNdArray, TensorFrames } from './tensors.js';
export { encodeAbortPayload, decodeAbortPayload } from '../tokenspeed/abort.js';
