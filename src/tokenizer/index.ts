/**
 * The tokenizer module (gateway.md sections 5-7): loading a Hugging Face tokenizer directory, chat templates,
 * EOS ids and UTF-8-safe incremental detokenization.
 */
export { GatewayTokenizer } from './tokenizer.js';
export type { ApplyChatTemplateOptions, ChatMessage, TokenizerLoadOptions } from './tokenizer.js';
export { IncrementalDetokenizer, KEEP_TOKENS, MAX_WINDOW_TOKENS, createDetokenizer } from './detokenizer.js';
export type { SequenceDetokenizer } from './detokenizer.js';
export { TableDetokenizer } from './table-detokenizer.js';
export { buildTokenTextTable } from './token-text-table.js';
export type { TokenTextTable, TokenTextTableResult } from './token-text-table.js';
export { ChatTemplateError, InvalidTokenIdError, OffLoopError, TokenizerLoadError } from './errors.js';
export { tokenIdMask } from './token-id-mask.js';
export type { ChatTemplateErrorKind, OffLoopErrorKind } from './errors.js';
export type { ModelEos, WarningSink } from './model-files.js';
export { analyzeTokenByteBound, normalizedByteLength } from './token-bytes.js';
export type { NormalForm, TokenByteBound } from './token-bytes.js';
export {
  DEFAULT_OFF_LOOP_LIMITS,
  OFF_LOOP_DECODE_MIN_IDS,
  OFF_LOOP_ENCODE_MIN_CHARS,
  OFF_LOOP_RENDER_MIN_MESSAGES,
  OffLoopTokenizer,
} from './off-loop.js';
export type { OffLoopLimits, OffLoopSignal, OffLoopStats } from './off-loop.js';
