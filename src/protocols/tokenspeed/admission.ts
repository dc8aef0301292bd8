/**
 * The engine-side admission decision for a decoded ADD (engine-wire.md 4.5 step 2 and 4.6; TokenSpeed
 * `zmq_wire.py` finalization, `zmq_msgpack.MsgpackRecvSocket` validation, and the request handler's session check).
 * For a simulated engine and for tests: it says whether TokenSpeed would admit a request or answer it with one
 * terminal `abort` row, and why. The gateway itself validates with `validateSamplingParams` before sending.
 */
import { WireEncodeError } from '../../wire/errors.js';
import type { TokenizedGenerateReqInput } from './request.js';
import { GREEDY_TEMPERATURE_EPSILON, TOP_K_DISABLED, validateSamplingParams } from './sampling.js';
import type { TokenSpeedSamplingParams } from './sampling.js';

/** The receive socket's configuration that validation depends on. */
export interface EngineAdmissionConfig {
  /** Vocabulary size: `logit_bias` keys must be in [0, vocabSize). Unchecked when absent. */
  vocabSize?: number;
  /** `--enable-output-logprobs`; when false, `return_logprob = true` is refused. Default true. */
  enableOutputLogprobs?: boolean;
}

/**
 * TokenSpeed's decode-time rewrite (`SamplingParams.__post_init__`, engine-wire.md 4.5 step 1), skipped when
 * `is_normalized` is true: `stop_strs` ← `stop`, empty `stop_token_ids` → nil, greedy collapse for temperature
 * < 1e-6, `top_k` −1 → 2^30. Returns a new object.
 */
export function engineDecodeRewrite(p: TokenSpeedSamplingParams): TokenSpeedSamplingParams {
  if (p.is_normalized) return { ...p };
  const out = { ...p, stop_strs: p.stop };
  if (out.stop_token_ids !== null && out.stop_token_ids.length === 0) out.stop_token_ids = null;
  if (out.temperature < GREEDY_TEMPERATURE_EPSILON) {
    out.temperature = 1.0;
    out.top_k = 1;
  }
  if (out.top_k == -1) out.top_k = TOP_K_DISABLED;
  return out;
}

/**
 * Why TokenSpeed would end this request with a terminal `abort` row at admission, or null when it would admit it.
 * Order as in the engine: a sender-set `validation_error` wins; then `n != 1` (finalization); then the logprob gate;
 * then the sampling checks of 4.6 (on the parameters after the decode-time rewrite); then a non-nil
 * `session_params.id` (the handler knows no sessions). Messages are ours, not TokenSpeed's text.
 */
export function engineAdmissionError(
  req: TokenizedGenerateReqInput,
  config: EngineAdmissionConfig = {},
): string | null {
  if (req.validation_error !== null) return req.validation_error;
  const sp = engineDecodeRewrite(req.sampling_params);
  if (sp.n != 1) return `n=${sp.n} is not supported on the msgpack wire; the frontend must fan out n > 1 itself`;
  if (req.return_logprob && config.enableOutputLogprobs === false) {
    return 'logprobs were requested but the server was started without --enable-output-logprobs';
  }
  try {
    validateSamplingParams(sp, { vocabSize: config.vocabSize, path: 'sampling_params' });
  } catch (err) {
    if (err instanceof WireEncodeError) return err.message;
    throw err;
  }
  if (req.session_params !== null && req.session_params.id !== null) {
    return `session id ${req.session_params.id} does not exist`;
  }
  return null;
}
