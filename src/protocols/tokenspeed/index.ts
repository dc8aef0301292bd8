/**
 * TokenSpeed's msgpack wire (engine-wire.md section 4): the `EngineProtocol` and the wire structs
 * (`TokenizedGenerateReqInput`, `SamplingParams`, `BatchTokenIDOutSlim`, the ABORT `list[str]`).
 */
export {
  tokenspeedProtocol,
  createTokenSpeedProtocol,
  toTokenizedGenerateReqInput,
  TOKENSPEED_RESERVED_CONTEXT_TOKENS,
} from './protocol.js';
export type { TokenSpeedProtocolOptions } from './protocol.js';
export {
  encodeTokenizedGenerateReqInput,
  decodeTokenizedGenerateReqInput,
  tokenizedGenerateReqInputCodec,
  sessionParamsCodec,
  TOKENIZED_GENERATE_REQ_INPUT_TAG,
  PREFIX_FORM_LENGTH,
  FULL_FORM_LENGTH,
} from './request.js';
export type { TokenizedGenerateReqInput, SessionParams, EncodeRequestOptions } from './request.js';
export {
  samplingParamsCodec,
  defaultSamplingParams,
  normalizeSamplingParams,
  toTokenSpeedSamplingParams,
  validateSamplingParams,
  TOP_K_DISABLED,
  GREEDY_TEMPERATURE_EPSILON,
  toTokenSpeedGrammar,
  tokenSpeedStructuredOutputProblem,
} from './sampling.js';
export type { TokenSpeedSamplingParams, SamplingValidationOptions } from './sampling.js';
export {
  encodeBatchTokenIDOutSlim,
  decodeBatchTokenIDOutSlim,
  batchToEngineBatch,
  loadFromBatch,
  toFinishReason,
  batchTokenIdOutSlimCodec,
  BATCH_TOKEN_ID_OUT_SLIM_TAG,
} from './output.js';
export type { BatchTokenIDOutSlim } from './output.js';
export { encodeAbortPayload, decodeAbortPayload } from './abort.js';
export { engineAdmissionError, engineDecodeRewrite } from './admission.js';
export type { EngineAdmissionConfig } from './admission.js';
