/**
 * End-of-sequence ids for vLLM requests (gateway.md section 7; SMG tests
 * `eos_backstop_appends_tokenizer_ids_without_duplicates`, `eos_backstop_leaves_tokenspeed_requests_untouched`).
 * EngineCore has no tokenizer, so the gateway supplies the EOS ids in the sampling map (engine-wire.md 5.3:
 * `stop_token_ids`, `_eos_token_id`, `_all_stop_token_ids`). TokenSpeed requests are never touched.
 *
 * Pure functions: reading `config.json` / `generation_config.json` is the caller's job (pass the parsed
 * `eos_token_id` values).
 */

/** The EOS ids resolved once at connect time (gateway.md 7 "At connect time"). Token ids are integers ≥ 0. */
export interface VllmEosConfig {
  /** The primary EOS id (`_eos_token_id`), or null when none is known. */
  primary: number | null;
  /** Every other distinct EOS id, in discovery order (appended to `stop_token_ids` unless `ignore_eos`). */
  extras: number[];
  /** The tokenizer's EOS ids, folded into `stop_token_ids` unless `ignore_eos` (SMG's "EOS backstop"). */
  tokenizerEosIds: number[];
}

/** No EOS ids at all: requests carry only their own stop ids. */
export const NO_EOS: Readonly<VllmEosConfig> = Object.freeze({ primary: null, extras: [], tokenizerEosIds: [] });

/** Where the connect-time EOS ids come from. `*EosTokenId` are the parsed `eos_token_id` values (or undefined). */
export interface EosSources {
  /** `config.json`'s `eos_token_id`: an integer, a list of integers, or anything else (ignored with a warning). */
  configEosTokenId?: unknown;
  /** `generation_config.json`'s `eos_token_id`, same forms. */
  generationConfigEosTokenId?: unknown;
  /** The tokenizer's EOS ids (used when both files yield none; also the per-request backstop). */
  tokenizerEosIds: readonly number[];
  /** Called with a message for a value that is neither an integer ≥ 0 nor a list of them. */
  onWarning?: (message: string) => void;
}

const isTokenId = (x: unknown): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;

/** The ids of one `eos_token_id` value: `5` → [5], `[5, 7]` → [5, 7]; null/undefined → []; else [] with a warning. */
function idsOf(value: unknown, file: string, warn?: (m: string) => void): number[] {
  if (value === undefined || value === null) return [];
  if (isTokenId(value)) return [value];
  if (Array.isArray(value) && value.every(isTokenId)) return [...value];
  warn?.(`${file}: eos_token_id ${JSON.stringify(value)} is not a token id or a list of token ids; ignored`);
  return [];
}

/**
 * Resolves the connect-time EOS ids (gateway.md 7): primary = the first id of `config.json`, else the first of
 * `generation_config.json`; extras = every other distinct id, in order. When the files yield no id, the
 * tokenizer's EOS ids are adopted (first = primary, rest = extras). Example: config 5, generation [5, 7, 9] →
 * primary 5, extras [7, 9]. Never throws.
 */
export function resolveEosConfig(sources: EosSources): VllmEosConfig {
  const tokenizerEosIds = sources.tokenizerEosIds.filter(isTokenId);
  let ids = [
    ...idsOf(sources.configEosTokenId, 'config.json', sources.onWarning),
    ...idsOf(sources.generationConfigEosTokenId, 'generation_config.json', sources.onWarning),
  ];
  if (ids.length === 0) ids = [...tokenizerEosIds];
  const distinct = [...new Set(ids)];
  return { primary: distinct[0] ?? null, extras: distinct.slice(1), tokenizerEosIds: [...new Set(tokenizerEosIds)] };
}

/** The three EOS-related keys of the vLLM sampling map (engine-wire.md 5.3). */
export interface VllmEosFields {
  stop_token_ids: number[];
  /** null ⇒ the key is omitted (always null with `ignore_eos`). */
  _eos_token_id: number | null;
  /** Sorted ascending, no duplicates. */
  _all_stop_token_ids: number[];
}

/**
 * The per-request EOS rule (gateway.md 7 "Per request"):
 * - unless `ignoreEos`: the tokenizer's EOS ids, then the extras, are appended to the request's stop ids without
 *   duplicates, and `_eos_token_id` = primary;
 * - always: `_all_stop_token_ids` = stop ids ∪ {primary} ∪ extras, as a sorted set.
 * The request's own ids keep their order (repeats dropped). Examples: EOS (5, [7]), stop [7, 9] → stop [7, 9],
 * eos 5, all [5, 7, 9]; with `ignoreEos`, stop [9] → stop [9], eos absent, all [5, 7, 9]; tokenizer EOS 999, stop
 * [7] → [7, 999]. Pure; throws nothing (the ids are validated by the caller).
 */
export function applyEosTokenIds(
  stopTokenIds: readonly number[],
  ignoreEos: boolean,
  eos: Readonly<VllmEosConfig> = NO_EOS,
): VllmEosFields {
  const stop: number[] = [];
  const add = (id: number) => {
    if (!stop.includes(id)) stop.push(id);
  };
  stopTokenIds.forEach(add);
  if (!ignoreEos) {
    eos.tokenizerEosIds.forEach(add);
    eos.extras.forEach(add);
  }
  const all = new Set<number>(stop);
  if (eos.primary !== null) all.add(eos.primary);
  eos.extras.forEach((id) => all.add(id));
  return {
    stop_token_ids: stop,
    _eos_token_id: ignoreEos ? null : eos.primary,
    _all_stop_token_ids: [...all].sort((a, b) => a - b),
  };
}
